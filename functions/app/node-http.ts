// The Node entry's HTTP server: @hono/node-server's request listener, plus the answers that listener and
// Node's own parser give without a body or content type, made problem+json like every other refusal:
// - asterisk-form (`OPTIONS *`) is answered here (204); any other method with `*` is a 400;
// - an HTTP/1.1 request without a Host header: 400 invalid-request (RFC 9112 §3.2), not Node's own bare
//   400 (its `requireHostHeader` check is turned off for this; HTTP/1.0 needs no Host);
// - absolute-form targets with an upper-case scheme (`GET HTTP://host/path`) are served (a scheme is
//   case-insensitive, the adapter recognises only `http://` and `https://`), and the Host header the
//   app sees is the target's authority: RFC 9112 §3.2.2 says a server ignores the received Host then
//   (so the gateway's X-Forwarded-Host names the host the client asked for);
// - a target or Host header the adapter cannot make a URL of: 400 invalid-request;
// - what Node's parser refuses (`clientError`): a method it does not know (TRACK) 501, oversized
//   headers 431, a request not received in time 408, anything else 400;
// - CONNECT (which Node hands to a `connect` listener, or else drops the connection): 501.
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { getRequestListener, RequestError } from '@hono/node-server';
import { PROBLEMS, problemResponse, problemType, type ProblemType } from '../../src/http/problem.js';

type FetchCallback = Parameters<typeof getRequestListener>[0];

function problemBody(type: ProblemType, detail: string): { status: number; body: string } {
  const { status, title } = PROBLEMS[type];
  return { status, body: JSON.stringify({ type: problemType(type), title, status, detail }) };
}

/** A whole problem+json response written to a socket that no response object owns; the socket is then closed. */
function writeRawProblem(socket: Duplex, type: ProblemType, detail: string): void {
  const { status, body } = problemBody(type, detail);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

// A request line: a method token, a target, a version. A parse error on one is an unknown method; on
// anything else, the bytes were not HTTP.
const REQUEST_LINE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^\s]+ HTTP\/\d\.\d\r?$/;

function clientErrorProblem(err: Error & { code?: string; rawPacket?: Buffer }): [ProblemType, string] {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return ['headers-too-large', 'the request head is larger than this server accepts'];
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return ['payload-too-large', 'the chunk extensions are larger than this server accepts'];
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return ['request-timeout', 'the request was not received in time'];
    case 'HPE_INVALID_METHOD': {
      const line = err.rawPacket?.toString('latin1').split('\n', 1)[0] ?? '';
      if (REQUEST_LINE.test(line)) return ['method-not-implemented', `this server does not know the method ${JSON.stringify(line.slice(0, line.indexOf(' ')).slice(0, 32))}`];
      return ['invalid-request', 'the request could not be parsed as HTTP/1.1'];
    }
    default:
      return ['invalid-request', 'the request could not be parsed as HTTP/1.1'];
  }
}

/** An absolute-form request target (`scheme://...`); group 1 is the scheme. */
const ABSOLUTE = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//;

/** Replaces every Host header line of `incoming` by one holding `host`, in `headers` and `rawHeaders` (which the adapter reads). */
function setHost(incoming: IncomingMessage, host: string): void {
  const raw: string[] = [];
  for (let i = 0; i < incoming.rawHeaders.length; i += 2) {
    if (incoming.rawHeaders[i]!.toLowerCase() !== 'host') raw.push(incoming.rawHeaders[i]!, incoming.rawHeaders[i + 1]!);
  }
  raw.push('Host', host);
  incoming.rawHeaders = raw;
  incoming.headers.host = host;
}

/** An HTTP server for `fetch`, listening on `port`/`hostname`; like @hono/node-server's `serve`, with the answers above. */
export function serveNode(options: { fetch: FetchCallback; port: number; hostname: string }, listening?: (info: AddressInfo) => void): Server {
  const listener = getRequestListener(options.fetch, {
    hostname: options.hostname,
    errorHandler: (err) =>
      err instanceof RequestError
        ? problemResponse('invalid-request', `the request target or Host header does not make a URL (${err.message})`)
        : problemResponse('internal-error', 'an unexpected error occurred'),
  });
  const refuse = (outgoing: ServerResponse, detail: string) => {
    const { status, body } = problemBody('invalid-request', detail);
    outgoing.writeHead(status, { 'Content-Type': 'application/problem+json', 'Content-Length': Buffer.byteLength(body), Connection: 'close' }).end(body);
  };
  // requireHostHeader off: Node would answer a missing Host with a bare 400; the check is made below.
  const server = createServer({ requireHostHeader: false }, (incoming, outgoing) => {
    const target = incoming.url ?? '';
    if (incoming.headers.host === undefined && incoming.httpVersionMajor === 1 && incoming.httpVersionMinor >= 1) {
      return refuse(outgoing, 'an HTTP/1.1 request must carry a Host header');
    }
    if (target === '*') {
      if (incoming.method === 'OPTIONS') {
        outgoing.writeHead(204).end();
      } else {
        const { status, body } = problemBody('invalid-request', 'the asterisk-form target `*` is for OPTIONS only');
        outgoing.writeHead(status, { 'Content-Type': 'application/problem+json', 'Content-Length': Buffer.byteLength(body) }).end(body);
      }
      return;
    }
    const scheme = ABSOLUTE.exec(target)?.[1];
    if (scheme) {
      const lower = scheme.toLowerCase();
      const absolute = lower + target.slice(scheme.length);
      if (scheme !== lower) incoming.url = absolute;
      if (lower === 'http' || lower === 'https') {
        // The URL the adapter builds from an absolute-form target is the target itself; Host follows it.
        // A target that makes no URL is left for the adapter to refuse.
        let authority: string | undefined;
        try {
          authority = new URL(absolute).host;
        } catch {
          // the adapter answers 400 invalid-request
        }
        if (authority) setHost(incoming, authority);
      }
    }
    return listener(incoming, outgoing);
  });
  server.on('clientError', (err: Error & { code?: string; rawPacket?: Buffer }, socket: Duplex) => {
    // As Node's own handler: answer only when nothing of a response has been written on this socket.
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (err.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
      socket.destroy();
      return;
    }
    const [type, detail] = clientErrorProblem(err);
    writeRawProblem(socket, type, detail);
  });
  server.on('connect', (_req, socket: Duplex) => writeRawProblem(socket, 'method-not-implemented', 'CONNECT is not served: this server is not a forward proxy'));
  // An Expect other than 100-continue: Node would answer a bare 417 (no body, no type).
  server.on('checkExpectation', (req, res) => {
    const { status, body } = problemBody('expectation-failed', `this server meets no Expect but 100-continue, got ${JSON.stringify(String(req.headers.expect).slice(0, 64))}`);
    res.writeHead(status, { 'Content-Type': 'application/problem+json', 'Content-Length': String(Buffer.byteLength(body)), Connection: 'close' });
    res.end(body);
  });
  server.listen(options.port, options.hostname, () => listening?.(server.address() as AddressInfo));
  return server;
}
