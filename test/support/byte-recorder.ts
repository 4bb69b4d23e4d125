// A raw TCP hop in front of a test origin that records every byte each connection carries to it, so a
// test judges a proxy by what reaches the origin's socket (framing included), not by what a parser or a
// fetch-based client makes of it. Connections are piped both ways unchanged, FIN and close included.
import { connect, createServer, type Socket } from 'node:net';

export interface RecordedConnection {
  /** What the connection carried to the origin, as latin1 text. */
  bytes: string;
  /** Whether the connection has closed. */
  closed: boolean;
}

export interface ByteRecorder {
  url: string;
  /** Every connection accepted, in order. */
  readonly connections: RecordedConnection[];
  /** The connections whose bytes contain `text` (e.g. a request line). */
  carrying(text: string): RecordedConnection[];
  close(): Promise<void>;
}

/** Listens on a free port of 127.0.0.1 and pipes each connection to `port` on 127.0.0.1. */
export async function startByteRecorder(port: number): Promise<ByteRecorder> {
  const connections: RecordedConnection[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const entry: RecordedConnection = { bytes: '', closed: false };
    connections.push(entry);
    const up = connect(port, '127.0.0.1');
    for (const s of [client, up]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => (sockets.delete(s), (entry.closed = true), client.destroy(), up.destroy()));
    }
    client.on('data', (d: Buffer) => ((entry.bytes += d.toString('latin1')), up.write(d)));
    client.on('end', () => up.end());
    up.pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    connections,
    carrying: (text) => connections.filter((c) => c.bytes.includes(text)),
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
