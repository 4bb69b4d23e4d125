// A plain Node `http` origin for gateway tests that logs every request its parser reads: the framing
// tests count them, so that a body the gateway sends unframed (and the origin reads as a second
// request on the kept-alive connection) shows up as an extra entry.
//
//   const origin = await startLoggingOrigin();
//   ... point GATE_ORIGIN at origin.url, send requests through the gateway ...
//   await origin.settled();                // every request parsed so far has its whole body
//   expect(origin.requests.map((r) => `${r.method} ${r.path}`)).toEqual(['DELETE /item']);
//   expect(origin.requests[0]!.body.toString('latin1')).toBe(payload);
//   origin.clear();                        // between cases
//   await origin.close();
//
// Connections are kept alive (60 s idle), as an origin behind a pooling proxy keeps them, and every
// answer says so. Requests the parser refuses are counted in `parseErrors`, with the bytes it had.
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

export interface LoggedRequest {
  method: string;
  /** The request target as received (origin-form: path and query). */
  path: string;
  headers: IncomingHttpHeaders;
  /** Header names and values in the order and case received. */
  rawHeaders: string[];
  /** The body bytes read so far; all of them once `complete`. */
  body: Buffer;
  /** Whether the whole body arrived (the parser saw the message end). */
  complete: boolean;
  /** Which connection it came on: 1 for the first the origin accepted, and so on. */
  connection: number;
}

export interface LoggingOriginOptions {
  /**
   * Answers a request once its body has been read. The default answers 200 with no Content-Type and
   * the body `<method> <path> <body length>`.
   */
  respond?: (req: LoggedRequest, res: ServerResponse) => void;
}

export interface LoggingOrigin {
  url: string;
  port: number;
  /** Every request parsed, in order of arrival (logged as soon as its head is parsed). */
  readonly requests: LoggedRequest[];
  /** Parse errors on any connection, with what the parser had read. */
  readonly parseErrors: { code: string | undefined; rawPacket: string }[];
  /** Connections accepted so far. */
  connections(): number;
  /** Resolves when every logged request is complete or its connection has closed (at most `ms`). */
  settled(ms?: number): Promise<void>;
  /** Forgets the logged requests and parse errors (connections stay open). */
  clear(): void;
  close(): Promise<void>;
}

const defaultRespond = (req: LoggedRequest, res: ServerResponse) => {
  res.end(`${req.method} ${req.path} ${req.body.length}`);
};

/** Starts the origin on 127.0.0.1, on a free port. */
export async function startLoggingOrigin(options: LoggingOriginOptions = {}): Promise<LoggingOrigin> {
  const respond = options.respond ?? defaultRespond;
  const requests: LoggedRequest[] = [];
  const parseErrors: { code: string | undefined; rawPacket: string }[] = [];
  const pending = new Set<Promise<void>>();
  const sockets = new Set<Socket>();
  const ids = new WeakMap<Socket, number>();
  let accepted = 0;

  const server = createServer({ keepAliveTimeout: 60_000 }, (incoming: IncomingMessage, res: ServerResponse) => {
    const entry: LoggedRequest = {
      method: incoming.method ?? '',
      path: incoming.url ?? '',
      headers: incoming.headers,
      rawHeaders: incoming.rawHeaders,
      body: Buffer.alloc(0),
      complete: false,
      connection: ids.get(incoming.socket) ?? 0,
    };
    requests.push(entry);
    const chunks: Buffer[] = [];
    const done = new Promise<void>((resolve) => {
      incoming.on('data', (d: Buffer) => {
        chunks.push(d);
        entry.body = Buffer.concat(chunks);
      });
      incoming.on('end', () => {
        entry.complete = true;
        resolve();
        respond(entry, res);
      });
      incoming.on('close', () => resolve());
    });
    pending.add(done);
    void done.then(() => pending.delete(done));
  });
  server.on('connection', (socket: Socket) => {
    ids.set(socket, ++accepted);
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.on('clientError', (err: Error & { code?: string; rawPacket?: Buffer }, socket: Socket) => {
    parseErrors.push({ code: err.code, rawPacket: err.rawPacket?.toString('latin1') ?? '' });
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as { port: number }).port;

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    requests,
    parseErrors,
    connections: () => accepted,
    async settled(ms = 5000) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.all(pending), new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
      clearTimeout(timer);
    },
    clear() {
      requests.length = 0;
      parseErrors.length = 0;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
