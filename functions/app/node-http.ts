// The Node entry's HTTP server: @hono/node-server's request listener, plus the answers that listener and
// Node's own parser give without a body or content type, made problem+json like every other refusal:
// - asterisk-form (`OPTIONS *`) is answered here (204); any other method with `*` is a 400;
// - Host (RFC 9112 §3.2): an HTTP/1.1 request without one, and any request with two Host lines or an
//   empty one, gets 400 invalid-request before any route or the limiter sees it (Node's own
//   `requireHostHeader` check is turned off for this; HTTP/1.0 needs no Host);
// - absolute-form targets (`GET http://host/path`, any case of the scheme) are served as their
//   origin-form path, with the target's authority as Host: RFC 9112 §3.2.2 says a server ignores the
//   received Host then (so the gateway's X-Forwarded-Host names the host the client asked for), and
//   the scheme of the URL the app sees is the one this socket speaks, never the one the client wrote;
// - a target or Host header the adapter cannot make a URL of: 400 invalid-request;
// - a Transfer-Encoding other than `chunked` alone: 501 (a coding this server does not apply, RFC 9112
//   §6.1), or 400 when `chunked` is not the last coding (§6.3, as Node's parser answers), and closed;
//   an HTTP/1.0 request with any Transfer-Encoding (faulty framing, §6.1): 400, and closed;
// - a response the app gives without a Content-Type goes out without one (@hono/node-server would add
//   `text/plain`): the gateway passes the origin's headers through as they were;
// - what Node's parser refuses (`clientError`): a method it does not know (TRACK) 501, oversized
//   headers 431, a request not received in time 408, anything else 400;
// - CONNECT (which Node hands to a `connect` listener, or else drops the connection): 501.
// Pipelined requests (RFC 9112 §9.3.2, §9.6): answers go out in request order, a parse error's answer
// included (it waits for the answers ahead of it); after a request that ends the connection (its own
// `Connection: close`, HTTP/1.0 without keep-alive, or a refusal here that closes) nothing more on the
// connection is processed: not routed, not charged, not forwarded.
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { getRequestListener, RequestError } from '@hono/node-server';
import { PROBLEMS, problemResponse, problemType, type ProblemType } from '../../src/http/problem.js';

type FetchCallback = Parameters<typeof getRequestListener>[0];
type ParseError = Error & { code?: string; rawPacket?: Buffer; bytesParsed?: number };

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

/** A problem+json answer through the request's own response object, which closes the connection after it. */
function answerAndClose(outgoing: ServerResponse, type: ProblemType, detail: string): void {
  const { status, body } = problemBody(type, detail);
  outgoing.writeHead(status, { 'Content-Type': 'application/problem+json', 'Content-Length': String(Buffer.byteLength(body)), Connection: 'close' }).end(body);
}

// A request line: a method token, a target, a version. A parse error on one is an unknown method; on
// anything else, the bytes were not HTTP.
const REQUEST_LINE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^\s]+ HTTP\/\d\.\d\r?$/;
const TCHAR = /[!#$%&'*+\-.^_`|~0-9A-Za-z]/;

/**
 * The line of the request the parser failed on. The packet can hold whole requests before it (pipelined
 * behind a body that has no line break of its own), so the line starts at the method token the error is in.
 */
function failingLine(err: ParseError): string {
  const packet = err.rawPacket;
  if (!packet) return '';
  const at = Math.min(Math.max(err.bytesParsed ?? 0, 0), packet.length);
  let start = at;
  while (start > 0 && packet[start - 1] !== 0x0a && TCHAR.test(String.fromCharCode(packet[start - 1]!))) start--;
  const end = packet.indexOf(0x0a, start);
  return packet.toString('latin1', start, end < 0 ? packet.length : end);
}

function clientErrorProblem(err: ParseError): [ProblemType, string] {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return ['headers-too-large', 'the request head is larger than this server accepts'];
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return ['payload-too-large', 'the chunk extensions are larger than this server accepts'];
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return ['request-timeout', 'the request was not received in time'];
    case 'HPE_INVALID_METHOD': {
      const line = failingLine(err);
      if (REQUEST_LINE.test(line)) return ['method-not-implemented', `this server does not know the method ${JSON.stringify(line.slice(0, line.indexOf(' ')).slice(0, 32))}`];
      return ['invalid-request', 'the request could not be parsed as HTTP/1.1'];
    }
    default:
      return ['invalid-request', 'the request could not be parsed as HTTP/1.1'];
  }
}

/**
 * A connection's pipeline: how many requests taken on it still have their answer to finish, the last one
 * taken, and whether one of them ends the connection (then nothing after it is processed, RFC 9112 §9.6).
 */
interface Pipeline {
  pending: number;
  closing: boolean;
  last?: { incoming: IncomingMessage; outgoing: ServerResponse };
  /** A parse error's answer, written once `pending` is down to `owed` (the answers ahead of it have gone out). */
  deferred?: { owed: number; answer: () => void };
}
const pipelines = new WeakMap<Duplex, Pipeline>();

function pipelineOf(socket: Duplex): Pipeline {
  let p = pipelines.get(socket);
  if (!p) pipelines.set(socket, (p = { pending: 0, closing: false }));
  return p;
}

/** Counts the request as pending on `pipeline` until its answer has finished (or its connection closed). */
function track(pipeline: Pipeline, incoming: IncomingMessage, outgoing: ServerResponse): void {
  pipeline.pending++;
  pipeline.last = { incoming, outgoing };
  let done = false;
  const settle = () => {
    if (done) return;
    done = true;
    pipeline.pending--;
    const deferred = pipeline.deferred;
    if (deferred && pipeline.pending <= deferred.owed) {
      pipeline.deferred = undefined;
      deferred.answer();
    }
  };
  // 'finish' comes after Node's own handler has let go of the socket, so a deferred answer follows this one.
  outgoing.once('finish', settle);
  outgoing.once('close', settle);
}

/** Why a request's Transfer-Encoding is refused, or undefined when it is absent or `chunked` alone. */
function transferCodingProblem(incoming: IncomingMessage): [ProblemType, string] | undefined {
  const values: string[] = [];
  for (let i = 0; i < incoming.rawHeaders.length; i += 2) {
    if (incoming.rawHeaders[i]!.toLowerCase() === 'transfer-encoding') values.push(incoming.rawHeaders[i + 1]!);
  }
  if (values.length === 0) return undefined;
  // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing (a 1.0 hop in between
  // may not have read it as chunked), so it is refused, and the connection closed, rather than served.
  if (incoming.httpVersionMajor === 1 && incoming.httpVersionMinor === 0) return ['invalid-request', 'an HTTP/1.0 request cannot carry Transfer-Encoding'];
  const codings = values.join(',').split(',').map((c) => c.trim().toLowerCase());
  if (codings.length === 1 && codings[0] === 'chunked') return undefined;
  const named = JSON.stringify(values.join(', ').slice(0, 64));
  // Node's parser refuses a request whose last coding is not chunked (its length cannot be known) before this.
  if (codings.at(-1) !== 'chunked') return ['invalid-request', `the body's length cannot be known: chunked is not the last of the transfer codings ${named}`];
  return ['transfer-coding-not-implemented', `this server applies no transfer coding but chunked, once; got ${named}`];
}

/** Why a request's Host is refused (RFC 9112 §3.2), or undefined. */
function hostProblem(incoming: IncomingMessage): string | undefined {
  let hosts = 0;
  let value = '';
  for (let i = 0; i < incoming.rawHeaders.length; i += 2) {
    if (incoming.rawHeaders[i]!.toLowerCase() === 'host') {
      hosts++;
      value = incoming.rawHeaders[i + 1]!;
    }
  }
  if (hosts > 1) return 'a request must carry one Host header, not several';
  if (hosts === 1 && value === '') return 'the Host header is empty';
  if (hosts === 0 && incoming.httpVersionMajor === 1 && incoming.httpVersionMinor >= 1) return 'an HTTP/1.1 request must carry a Host header';
  return undefined;
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

/**
 * An http(s) absolute-form target made origin-form (its path and query as written), with Host set to its
 * authority. A target that makes no URL is left for the adapter to refuse (400 invalid-request).
 */
function toOriginForm(incoming: IncomingMessage, target: string, scheme: string): void {
  const lower = scheme.toLowerCase();
  if (lower !== 'http' && lower !== 'https') return;
  let authority: string;
  try {
    authority = new URL(lower + target.slice(scheme.length)).host;
  } catch {
    return;
  }
  if (!authority) return;
  const rest = target.slice(scheme.length + 3);
  const pathAt = rest.search(/[/?#]/);
  const path = pathAt < 0 ? '/' : rest.slice(pathAt);
  incoming.url = path.startsWith('/') ? path : `/${path}`;
  setHost(incoming, authority);
}

/**
 * Makes `outgoing` write its head without a Content-Type. @hono/node-server gives every response with a
 * body one (`text/plain; charset=UTF-8`) when it has none, and a proxy passes the origin's headers
 * through as they were (issue 30, 7a).
 */
function withoutDefaultType(outgoing: ServerResponse): void {
  const writeHead = outgoing.writeHead;
  outgoing.writeHead = function (this: ServerResponse, ...args: unknown[]) {
    const headers = args.at(-1);
    if (headers && typeof headers === 'object' && !Array.isArray(headers)) {
      for (const name of Object.keys(headers)) if (name.toLowerCase() === 'content-type') delete (headers as Record<string, unknown>)[name];
    }
    return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
  } as typeof outgoing.writeHead;
}

/** An HTTP server for `fetch`, listening on `port`/`hostname`; like @hono/node-server's `serve`, with the answers above. */
export function serveNode(options: { fetch: FetchCallback; port: number; hostname: string }, listening?: (info: AddressInfo) => void): Server {
  // A response the app gives without a Content-Type goes out without one. A response the app gives at
  // once is passed on at once (no promise in between on the way of every request).
  const typed = (res: Response, env: unknown): Response => {
    if (!res.headers.has('content-type')) withoutDefaultType((env as { outgoing: ServerResponse }).outgoing);
    return res;
  };
  const fetch: FetchCallback = (req, env) => {
    const res = options.fetch(req, env) as Response | Promise<Response>;
    return res instanceof Promise ? res.then((r) => typed(r, env)) : typed(res, env);
  };
  const listener = getRequestListener(fetch, {
    hostname: options.hostname,
    errorHandler: (err) =>
      err instanceof RequestError
        ? problemResponse('invalid-request', `the request target or Host header does not make a URL (${err.message})`)
        : problemResponse('internal-error', 'an unexpected error occurred'),
  });
  // requireHostHeader off: Node would answer a missing Host with a bare 400; the check is made below.
  const server = createServer({ requireHostHeader: false }, (incoming, outgoing) => {
    const pipeline = pipelineOf(incoming.socket);
    // A request pipelined after one that ends the connection is never processed; its answer is never sent.
    if (pipeline.closing) return;
    track(pipeline, incoming, outgoing);
    // A request asking for an upgrade (Upgrade, and Connection naming it): Node's parser stops reading
    // the connection there and drops what was pipelined behind it. The gateway upgrades nothing: the
    // request is served as it is and is the connection's last, its answer saying Connection: close.
    if (incoming.headers.upgrade !== undefined && /(^|,)\s*upgrade\s*(,|$)/i.test(incoming.headers.connection ?? '')) outgoing.shouldKeepAlive = false;
    // Its own Connection: close, or HTTP/1.0 without keep-alive: it is the connection's last.
    if (!outgoing.shouldKeepAlive) pipeline.closing = true;
    const refuse = (type: ProblemType, detail: string) => {
      pipeline.closing = true;
      answerAndClose(outgoing, type, detail);
    };
    // Node's parser passes HTTP/0.9 (a request line with no version, "GET /x") and HTTP/2.0 on to here and
    // answers 400 to any other version but 1.x itself; so do these, rather than serve them as HTTP/1.1.
    if (incoming.httpVersionMajor !== 1) return refuse('invalid-request', `this server speaks HTTP/1.x; the request line was read as HTTP/${incoming.httpVersion}`);
    const coding = transferCodingProblem(incoming);
    if (coding) return refuse(...coding);
    const host = hostProblem(incoming);
    if (host) return refuse('invalid-request', host);
    const target = incoming.url ?? '';
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
    if (scheme) toOriginForm(incoming, target, scheme);
    return listener(incoming, outgoing);
  });
  server.on('clientError', (err: ParseError, socket: Duplex) => {
    if (err.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    const pipeline = pipelineOf(socket);
    // One answer per connection: the parser reads nothing after its first error.
    if (pipeline.deferred) return;
    // The request the error is in, when it was taken before its body was whole (a malformed chunk, a
    // body not received in time): the error's answer is its answer, unless its own has begun.
    const failing = pipeline.last && !pipeline.last.incoming.complete ? pipeline.last : undefined;
    // Bytes after a request that ends the connection (Node's parser reads them as an error): the answers
    // in flight go out, then the connection closes; nothing after them is read or answered.
    if (pipeline.closing && !failing) {
      if (pipeline.pending === 0) socket.destroy();
      return;
    }
    pipeline.closing = true;
    const [type, detail] = clientErrorProblem(err);
    const answer = () => {
      const own = failing?.outgoing;
      if (!own?.headersSent) writeRawProblem(socket, type, detail);
      // Its own answer has begun: it is the last on this connection, cut short if it is not whole.
      else if (own.writableFinished) socket.end();
      else if (own.writableEnded) own.once('finish', () => socket.end());
      else socket.destroy();
    };
    const owed = failing ? 1 : 0;
    // Answers are owed for the requests before this one: this one's goes out after them, in order.
    if (pipeline.pending > owed) pipeline.deferred = { owed, answer };
    else answer();
  });
  server.on('connect', (_req, socket: Duplex) => writeRawProblem(socket, 'method-not-implemented', 'CONNECT is not served: this server is not a forward proxy'));
  // An Expect other than 100-continue: Node would answer a bare 417 (no body, no type). The request is
  // not processed, and the connection closes after the answer.
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const pipeline = pipelineOf(req.socket as Socket);
    if (pipeline.closing) return;
    track(pipeline, req, res);
    pipeline.closing = true;
    answerAndClose(res, 'expectation-failed', `this server meets no Expect but 100-continue, got ${JSON.stringify(String(req.headers.expect).slice(0, 64))}`);
  });
  server.listen(options.port, options.hostname, () => listening?.(server.address() as AddressInfo));
  return server;
}
