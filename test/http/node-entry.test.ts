// The Node entry (functions/node.ts, what `npm start` runs) driven by raw request lines over a socket:
// valid requests that @hono/node-server or Node's parser used to answer with a bare 400 (no body, no
// content type) are served, and every refusal is problem+json.
import { connect } from 'node:net';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNodeServer, type NodeServer } from '../support/node-server.js';

let server: NodeServer;
let origin: Server;
let originHits = 0;
/** The headers of the last request the origin received. */
let originHeaders: IncomingHttpHeaders = {};

beforeAll(async () => {
  origin = createServer((req, res) => {
    originHits++;
    originHeaders = req.headers;
    res.end(`origin ${req.method} ${req.url}`);
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', () => r()));
  server = await startNodeServer({
    LIMITER_STORE: 'memory',
    LIMITER_POLICIES: JSON.stringify({ gate: { capacity: 100, refillPerSecond: 1 } }),
    PERMIT_TOKENS: 't',
    GATE_ORIGIN: `http://127.0.0.1:${(origin.address() as { port: number }).port}`,
  });
}, 60_000);
afterAll(async () => {
  await server?.stop();
  await new Promise<void>((r) => origin.close(() => r()));
});

type RawReply = { status: number; headers: Record<string, string>; body: string };

/** Writes `request` as is and reads one response (the connection closes after it, or at Content-Length). */
function raw(request: string): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const socket = connect(server.port, '127.0.0.1', () => socket.write(request));
    let data = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete response to ${JSON.stringify(request.slice(0, 60))}; got ${JSON.stringify(data.toString('latin1'))}`));
    }, 5000);
    const tryParse = (final: boolean) => {
      const text = data.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      if (end < 0) return final ? (clearTimeout(timer), reject(new Error(`no response head, got ${JSON.stringify(text)}`))) : undefined;
      const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
      const length = headers['content-length'] === undefined ? undefined : Number(headers['content-length']);
      const body = data.subarray(Buffer.byteLength(text.slice(0, end + 4), 'latin1'));
      if (length !== undefined && body.length < length && !final) return;
      if (length === undefined && !final && headers['transfer-encoding'] === undefined && Number(statusLine!.split(' ')[1]) !== 204) return;
      clearTimeout(timer);
      socket.destroy();
      resolve({ status: Number(statusLine!.split(' ')[1]), headers, body: body.subarray(0, length ?? body.length).toString('utf8') });
    };
    socket.on('data', (d: Buffer) => {
      data = Buffer.concat([data, d]);
      tryParse(false);
    });
    socket.on('end', () => tryParse(true));
    socket.on('error', () => tryParse(true));
  });
}

function expectProblem(r: RawReply, status: number, type: string) {
  expect(r.status).toBe(status);
  expect(r.headers['content-type']).toBe('application/problem+json');
  expect(JSON.parse(r.body)).toMatchObject({ type: `urn:edge-limiter:problem:${type}`, status });
}

describe('Node entry: raw request lines', () => {
  it('OPTIONS * (asterisk-form) is answered 204, not a bare 400', async () => {
    const r = await raw('OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    expect(r.status).toBe(204);
    // Any other method with `*` is malformed: a 400, as problem+json.
    expectProblem(await raw('GET * HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'), 400, 'invalid-request');
  });

  it('absolute-form with an upper-case scheme is served like the lower-case one', async () => {
    for (const scheme of ['http', 'HTTP', 'Http']) {
      const r = await raw(`GET ${scheme}://127.0.0.1:${server.port}/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      expect(r.status, scheme).toBe(200);
      expect(JSON.parse(r.body)).toMatchObject({ ok: true, store: 'memory' });
    }
  });

  it('a target or Host the adapter cannot make a URL of: 400 problem+json, not a bare 400', async () => {
    expectProblem(await raw('GET ftp://127.0.0.1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'), 400, 'invalid-request');
    expectProblem(await raw('GET /a\\b HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n'), 400, 'invalid-request');
    expectProblem(await raw('GET /healthz HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n'), 400, 'invalid-request');
  });

  it('what Node’s parser refuses is problem+json: an unknown method 501, oversized headers 431, garbage 400', async () => {
    const hits = originHits;
    expectProblem(await raw('TRACK /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'), 501, 'method-not-implemented');
    expectProblem(await raw(`GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`), 431, 'headers-too-large');
    expectProblem(await raw('HELLO\r\n\r\n'), 400, 'invalid-request');
    expectProblem(await raw('GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n'), 400, 'invalid-request');
    // An Expect this server cannot meet: Node's own answer was a bare 417.
    expectProblem(await raw('POST /v1/permits HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: foo\r\nContent-Length: 0\r\n\r\n'), 417, 'expectation-failed');
    expect(originHits).toBe(hits);
  });

  it('CONNECT is refused 501 problem+json (it used to close the connection without an answer); TRACE too, uncharged', async () => {
    expectProblem(await raw('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n'), 501, 'method-not-implemented');
    const hits = originHits;
    const r = await raw('TRACE /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    expectProblem(r, 501, 'method-not-implemented');
    expect(r.headers.ratelimit).toBeUndefined();
    expect(originHits).toBe(hits);
    // The gateway still forwards ordinary requests.
    const ok = await raw('GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    expect(ok.status).toBe(200);
    expect(ok.body).toBe('origin GET /x');
    expect(ok.headers.ratelimit).toBe('"gate";r=99;t=1');
  });
});

// After the block above, whose last test counts on the gate's tokens charged so far.
describe('Node entry: Host', () => {
  it('absolute-form: the Host the origin is told (X-Forwarded-Host) is the target’s authority, not the Host header (RFC 9112 §3.2.2)', async () => {
    for (const scheme of ['http', 'hTTp']) {
      const r = await raw(`GET ${scheme}://127.0.0.1:${server.port}/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      expect(r.body, scheme).toBe('origin GET /x');
      expect(originHeaders['x-forwarded-host'], scheme).toBe(`127.0.0.1:${server.port}`);
    }
    // Another host in the target than in Host (the URL's host is lower case, its default port dropped).
    await raw('GET HTTP://API.Example:80/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    expect(originHeaders['x-forwarded-host']).toBe('api.example');
    // Origin-form: X-Forwarded-Host is the Host header, as before.
    await raw('GET /x HTTP/1.1\r\nHost: api.example:8443\r\nConnection: close\r\n\r\n');
    expect(originHeaders['x-forwarded-host']).toBe('api.example:8443');
  });

  it('an HTTP/1.1 request without Host: 400 invalid-request problem+json, not Node’s bare 400; HTTP/1.0 needs none', async () => {
    const hits = originHits;
    expectProblem(await raw('GET /x HTTP/1.1\r\nConnection: close\r\n\r\n'), 400, 'invalid-request');
    // Absolute-form needs Host too in HTTP/1.1 (RFC 9112 §3.2), though the target's authority is used.
    expectProblem(await raw(`GET http://127.0.0.1:${server.port}/x HTTP/1.1\r\nConnection: close\r\n\r\n`), 400, 'invalid-request');
    expectProblem(await raw('OPTIONS * HTTP/1.1\r\nConnection: close\r\n\r\n'), 400, 'invalid-request');
    expect(originHits).toBe(hits);
    const old = await raw('GET /x HTTP/1.0\r\n\r\n');
    expect(old.status).toBe(200);
    expect(old.body).toBe('origin GET /x');
  });
});
