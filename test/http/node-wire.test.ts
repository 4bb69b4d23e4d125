// The Node entry (functions/node.ts, what `npm start` runs) in gateway mode, driven by raw bytes: every
// case is written in one write on a fresh connection, and the test reads every answer on the wire, in
// order, until the server closes. What was charged is read from the permit API's buckets, what was
// forwarded from an origin that logs every request its parser reads.
// - Host (RFC 9112 §3.2): two Host lines or an empty one: 400 before any route or the limiter;
// - a version other than HTTP/1.x (HTTP/0.9's line without one, HTTP/2.0): 400 before the limiter;
// - pipelining (RFC 9112 §9.3.2, §9.6): answers in request order, a parse error's after the answers ahead
//   of it; nothing after a request that closes the connection is processed;
// - framing: Transfer-Encoding other than chunked, obsolete line folding, bare LF, Content-Length with
//   Transfer-Encoding, bodies shorter and longer than their Content-Length;
// - an absolute-form target's scheme never reaches the origin as X-Forwarded-Proto.
import { connect } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startNodeServer, type NodeServer } from '../support/node-server.js';
import { startLoggingOrigin, type LoggingOrigin } from '../support/logging-origin.js';

const TOKEN = 't';
let server: NodeServer;
let origin: LoggingOrigin;

beforeAll(async () => {
  origin = await startLoggingOrigin();
  server = await startNodeServer({
    LIMITER_STORE: 'memory',
    // Buckets that do not refill within a test: what was charged stays readable.
    LIMITER_POLICIES: JSON.stringify({ p: { capacity: 100, refillPerSecond: 0.001 }, gate: { capacity: 100, refillPerSecond: 0.001 } }),
    PERMIT_TOKENS: TOKEN,
    GATE_ORIGIN: origin.url,
    GATE_POLICY: 'gate',
    GATE_KEY: 'header:x-api-key',
  });
}, 60_000);
afterAll(async () => {
  await server?.stop();
  await origin?.close();
});
beforeEach(() => origin.clear());

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}
interface Wire {
  answers: Answer[];
  /** The server closed the connection (within the wait). */
  closed: boolean;
  /** Bytes after the last whole answer. */
  rest: string;
}

/** Parses every whole response in `data` (Content-Length bodies; 204/304 and answers to HEAD have none). */
function parseAnswers(data: string): { answers: Answer[]; rest: string } {
  const answers: Answer[] = [];
  let at = 0;
  for (;;) {
    const end = data.indexOf('\r\n\r\n', at);
    if (end < 0) break;
    const [statusLine, ...lines] = data.slice(at, end).split('\r\n');
    const headers: Record<string, string> = {};
    for (const l of lines) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
    const length = Number(headers['content-length'] ?? 0);
    if (data.length < end + 4 + length) break;
    answers.push({ status: Number(statusLine!.split(' ')[1]), headers, body: data.slice(end + 4, end + 4 + length) });
    at = end + 4 + length;
  }
  return { answers, rest: data.slice(at) };
}

/**
 * Writes `bytes` in one write and reads until the server closes, or `waitMs` passes with the
 * connection still open (then `closed` is false). `keepOpenMs`: the client waits that long before it
 * reads the result, without closing its side first.
 */
function exchange(bytes: string, waitMs = 3000): Promise<Wire> {
  return new Promise((resolve) => {
    const socket = connect(server.port, '127.0.0.1', () => socket.write(Buffer.from(bytes, 'latin1')));
    let data = '';
    let closed = false;
    const finish = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ ...parseAnswers(data), closed });
    };
    const timer = setTimeout(finish, waitMs);
    socket.on('data', (d: Buffer) => (data += d.toString('latin1')));
    socket.on('close', () => {
      closed = true;
      finish();
    });
    socket.on('error', () => {});
  });
}

const json = (a: Answer) => JSON.parse(a.body) as Record<string, unknown>;
const problemOf = (a: Answer) => {
  expect(a.headers['content-type']).toBe('application/problem+json');
  return json(a);
};

function permit(key: string, extra = '', version = '1.1'): string {
  const body = JSON.stringify({ policy: 'p', key });
  return `POST /v1/permits HTTP/${version}\r\nHost: gw\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Type: application/json\r\n${extra}Content-Length: ${body.length}\r\n\r\n${body}`;
}

/** How many tokens `key`'s bucket of policy `p` has been charged. */
async function charged(key: string): Promise<number> {
  const res = await fetch(`${server.url}/v1/buckets/p/${key}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  const body = (await res.json()) as { remaining: number };
  return Math.round(100 - body.remaining);
}

/** The requests the origin parsed, as `METHOD path`. */
async function forwarded(): Promise<string[]> {
  await new Promise((r) => setTimeout(r, 100));
  await origin.settled();
  return origin.requests.map((r) => `${r.method} ${r.path}`);
}

let n = 0;
/** A key no other case uses. */
const fresh = (name: string) => `${name}-${++n}-${Date.now()}`;

describe('Node entry: Host (RFC 9112 §3.2)', () => {
  it('two Host lines, the same value or two, and an empty Host: 400 invalid-request on every route, nothing charged or forwarded, then close', async () => {
    for (const hosts of ['Host: a.example\r\nHost: b.example\r\n', 'Host: a.example\r\nHost: a.example\r\n', 'Host:\r\n', 'Host: \r\n']) {
      const k = fresh('host');
      for (const request of [`GET /healthz HTTP/1.1\r\n${hosts}\r\n`, permit(k).replace('Host: gw\r\n', hosts), `GET /page HTTP/1.1\r\n${hosts}X-API-KEY: ${k}\r\n\r\n`]) {
        const wire = await exchange(request);
        expect(wire.answers.map((a) => a.status), JSON.stringify(request)).toEqual([400]);
        expect(problemOf(wire.answers[0]!)).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request', status: 400 });
        expect(wire.closed).toBe(true);
      }
      expect(await charged(k)).toBe(0);
      expect(await forwarded()).toEqual([]);
    }
    // HTTP/1.0 needs no Host, but an empty one is still refused.
    expect((await exchange('GET /healthz HTTP/1.0\r\nHost:\r\n\r\n')).answers.map((a) => a.status)).toEqual([400]);
    expect((await exchange('GET /healthz HTTP/1.0\r\n\r\n')).answers.map((a) => a.status)).toEqual([200]);
  });

  it('absolute-form: X-Forwarded-Proto is the scheme of the connection (http), never the one the target names', async () => {
    for (const target of ['https://gw/x', 'HTTPS://gw:443/x', 'http://gw/x']) {
      origin.clear();
      const wire = await exchange(`GET ${target}?q=1 HTTP/1.1\r\nHost: other\r\nX-API-KEY: ${fresh('abs')}\r\nConnection: close\r\n\r\n`);
      expect(wire.answers.map((a) => a.status), target).toEqual([200]);
      expect(await forwarded()).toEqual(['GET /x?q=1']);
      expect(origin.requests[0]!.headers['x-forwarded-proto'], target).toBe('http');
      expect(origin.requests[0]!.headers['x-forwarded-host'], target).toBe('gw');
    }
  });
});

describe('Node entry: HTTP version', () => {
  it('a request line with no version (HTTP/0.9, no Host) or HTTP/2.0: 400 problem+json and close, nothing charged or forwarded', async () => {
    for (const line of ['GET /h09-probe', 'GET /h09-probe HTTP/0.9', 'GET /h20-probe HTTP/2.0']) {
      const key = fresh('ver');
      const wire = await exchange(`${line}\r\nX-API-KEY: ${key}\r\n\r\n`);
      expect(wire.answers.map((a) => a.status), line).toEqual([400]);
      expect(problemOf(wire.answers[0]!)).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request' });
      expect(wire.closed).toBe(true);
      const gate = (await (await fetch(`${server.url}/v1/buckets/gate/${key}`, { headers: { Authorization: `Bearer ${TOKEN}` } })).json()) as { remaining: number };
      expect(gate.remaining, line).toBe(100);
      expect(await forwarded(), line).toEqual([]);
    }
  });
});

describe('Node entry: pipelined requests (RFC 9112 §9.3.2, §9.6)', () => {
  it('POST k1, POST k2, then a malformed request: 200, 200, then the 400, in that order, then close; k1 and k2 charged once', async () => {
    const [k1, k2] = [fresh('k1'), fresh('k2')];
    const wire = await exchange(permit(k1) + permit(k2) + 'GARBAGE\r\n\r\n');
    expect(wire.answers.map((a) => a.status)).toEqual([200, 200, 400]);
    expect(json(wire.answers[0]!)).toMatchObject({ key: k1, allowed: true });
    expect(json(wire.answers[1]!)).toMatchObject({ key: k2, allowed: true });
    // Garbage behind a body is not a request line: invalid-request, not "does not know the method POST".
    expect(problemOf(wire.answers[2]!)).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request' });
    expect(wire.closed).toBe(true);
    expect(await charged(k1)).toBe(1);
    expect(await charged(k2)).toBe(1);
  });

  it('an unknown method behind a valid POST: the 501 names that request’s method, after the POST’s answer', async () => {
    const k1 = fresh('k1');
    const wire = await exchange(permit(k1) + 'TRACK /x HTTP/1.1\r\nHost: gw\r\n\r\n');
    expect(wire.answers.map((a) => a.status)).toEqual([200, 501]);
    expect(problemOf(wire.answers[1]!)).toMatchObject({ type: 'urn:edge-limiter:problem:method-not-implemented', detail: 'this server does not know the method "TRACK"' });
    expect(wire.closed).toBe(true);
  });

  it('POST k1 with Connection: close (or HTTP/1.0), then POST k2: k1 answered, k2 never processed nor charged', async () => {
    for (const [extra, version] of [['Connection: close\r\n', '1.1'], ['', '1.0']] as const) {
      const [k1, k2] = [fresh('k1'), fresh('k2')];
      const wire = await exchange(permit(k1, extra, version) + permit(k2));
      expect(wire.answers.map((a) => a.status), version).toEqual([200]);
      expect(json(wire.answers[0]!)).toMatchObject({ key: k1 });
      expect(wire.rest).toBe('');
      expect(wire.closed).toBe(true);
      expect(await charged(k1)).toBe(1);
      expect(await charged(k2)).toBe(0);
    }
  });

  it('POST k1 with Expect: foo (417, close), then POST k2: the 417 only, neither charged', async () => {
    const [k1, k2] = [fresh('k1'), fresh('k2')];
    const wire = await exchange(permit(k1, 'Expect: foo\r\n') + permit(k2));
    expect(wire.answers.map((a) => a.status)).toEqual([417]);
    expect(problemOf(wire.answers[0]!)).toMatchObject({ type: 'urn:edge-limiter:problem:expectation-failed' });
    expect(wire.rest).toBe('');
    expect(wire.closed).toBe(true);
    expect(await charged(k1)).toBe(0);
    expect(await charged(k2)).toBe(0);
  });

  it('GET without Host (400, close), then POST k2: the 400 only, k2 never charged', async () => {
    const k2 = fresh('k2');
    const wire = await exchange('GET /healthz HTTP/1.1\r\n\r\n' + permit(k2));
    expect(wire.answers.map((a) => a.status)).toEqual([400]);
    expect(wire.closed).toBe(true);
    expect(await charged(k2)).toBe(0);
  });

  it('gateway: nothing pipelined after a 417, a 400 or a Connection: close reaches the origin', async () => {
    const next = `GET /smuggled HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${fresh('next')}\r\n\r\n`;
    const cases: [string, number[]][] = [
      [`GET /a HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${fresh('a')}\r\nExpect: foo\r\n\r\n`, [417]],
      [`GET /a HTTP/1.1\r\nX-API-KEY: ${fresh('a')}\r\n\r\n`, [400]],
      [`GET /a HTTP/1.1\r\nHost: gw\r\nHost: gw\r\nX-API-KEY: ${fresh('a')}\r\n\r\n`, [400]],
      [`POST /a HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${fresh('a')}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n`, [501]],
    ];
    for (const [first, statuses] of cases) {
      origin.clear();
      const wire = await exchange(first + next);
      expect(wire.answers.map((a) => a.status), JSON.stringify(first)).toEqual(statuses);
      expect(wire.closed).toBe(true);
      expect(await forwarded(), JSON.stringify(first)).toEqual([]);
    }
    origin.clear();
    const wire = await exchange(`GET /a HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${fresh('a')}\r\nConnection: close\r\n\r\n` + next);
    expect(wire.answers.map((a) => a.status)).toEqual([200]);
    expect(await forwarded()).toEqual(['GET /a']);
  });

  it('gateway: answers to pipelined forwards come back in request order', async () => {
    const wire = await exchange(['/one', '/two', '/three'].map((p) => `GET ${p} HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${fresh('o')}\r\n\r\n`).join('') + 'GARBAGE\r\n\r\n');
    expect(wire.answers.map((a) => `${a.status} ${a.body}`)).toEqual(['200 GET /one 0', '200 GET /two 0', '200 GET /three 0', expect.stringMatching(/^400 /)]);
    expect(wire.closed).toBe(true);
  });
});

describe('Node entry: framing', () => {
  it('Transfer-Encoding other than chunked alone is refused before the limiter, and the connection closes', async () => {
    const cases: [string, number, string][] = [
      // A coding this server does not apply (RFC 9112 §6.1).
      ['Transfer-Encoding: gzip, chunked\r\n', 501, 'transfer-coding-not-implemented'],
      ['Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n', 501, 'transfer-coding-not-implemented'],
      // chunked not last: the body's length cannot be known (RFC 9112 §6.3: 400, then close).
      ['Transfer-Encoding: identity\r\n', 400, 'invalid-request'],
      ['Transfer-Encoding: chunked, gzip\r\n', 400, 'invalid-request'],
      // chunked twice (a sender must not apply it twice): Node's parser refuses it.
      ['Transfer-Encoding: chunked, chunked\r\n', 400, 'invalid-request'],
      ['Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n', 400, 'invalid-request'],
    ];
    for (const [te, status, type] of cases) {
      origin.clear();
      const k = fresh('te');
      const wire = await exchange(`POST /up HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${k}\r\n${te}\r\n3\r\nabc\r\n0\r\n\r\n` + permit(k));
      expect(wire.answers.map((a) => a.status), te).toEqual([status]);
      expect(problemOf(wire.answers[0]!), te).toMatchObject({ type: `urn:edge-limiter:problem:${type}` });
      expect(wire.closed).toBe(true);
      expect(await forwarded(), te).toEqual([]);
      expect(await charged(k), te).toBe(0);
    }
    // chunked alone, in any case, is served.
    origin.clear();
    const ok = await exchange(`POST /up HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${fresh('te')}\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n`);
    expect(ok.answers.map((a) => `${a.status} ${a.body}`)).toEqual(['200 POST /up 3']);
  });

  it('HTTP/1.0 with Transfer-Encoding (faulty framing, RFC 9112 §6.1): 400, closed, and nothing pipelined after it is read', async () => {
    origin.clear();
    const k = fresh('te10');
    const after = fresh('te10b');
    const wire = await exchange(
      `POST /up HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\nX-API-KEY: ${k}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n` +
        `GET /after HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${after}\r\n\r\n`,
    );
    expect(wire.answers.map((a) => a.status)).toEqual([400]);
    expect(problemOf(wire.answers[0]!)).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request' });
    expect(wire.closed).toBe(true);
    expect(await forwarded()).toEqual([]);
    expect(await charged(k)).toBe(0);
    expect(await charged(after)).toBe(0);
  });

  it('obsolete line folding, bare LF, Content-Length with Transfer-Encoding, two Content-Lengths: 400 problem+json, nothing forwarded', async () => {
    const cases = [
      'GET /fold HTTP/1.1\r\nHost: gw\r\nX-API-KEY: a\r\nX-Folded: one\r\n two\r\n\r\n',
      'GET /lf HTTP/1.1\nHost: gw\nX-API-KEY: a\n\n',
      'GET /lf HTTP/1.1\r\nHost: gw\nX-API-KEY: a\r\n\r\n',
      'POST /both HTTP/1.1\r\nHost: gw\r\nX-API-KEY: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
      'POST /both HTTP/1.1\r\nHost: gw\r\nX-API-KEY: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
      'POST /two HTTP/1.1\r\nHost: gw\r\nX-API-KEY: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd',
      'POST /two HTTP/1.1\r\nHost: gw\r\nX-API-KEY: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc',
    ];
    for (const request of cases) {
      origin.clear();
      const wire = await exchange(request);
      expect(wire.answers.map((a) => a.status), JSON.stringify(request)).toEqual([400]);
      expect(problemOf(wire.answers[0]!)).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request' });
      expect(wire.closed).toBe(true);
      expect(await forwarded(), JSON.stringify(request)).toEqual([]);
    }
  });

  it('a body longer than its Content-Length: the rest is the next request, gated on its own key (or refused if it is no request)', async () => {
    const [a, b] = [fresh('a'), fresh('b')];
    const wire = await exchange(`POST /x HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${a}\r\nContent-Length: 3\r\n\r\nabcGET /next HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${b}\r\nConnection: close\r\n\r\n`);
    expect(wire.answers.map((x) => `${x.status} ${x.body} ${x.headers.ratelimit}`)).toEqual(['200 POST /x 3 "gate";r=99;t=1000', '200 GET /next 0 "gate";r=99;t=1000']);
    // Pipelined requests are forwarded as they are decided, each on its own connection to the origin:
    // the answers keep their order, the origin may parse them in either.
    expect((await forwarded()).sort()).toEqual(['GET /next', 'POST /x']);
    expect(origin.requests.find((r) => r.path === '/x')!.body.toString()).toBe('abc');
    expect(origin.requests.find((r) => r.path === '/next')!.headers['x-forwarded-for']).toBe('127.0.0.1');
    origin.clear();
    const junk = await exchange(`POST /x HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${fresh('a')}\r\nContent-Length: 3\r\n\r\nabcdefg\r\n\r\n`);
    expect(junk.answers.map((x) => x.status)).toEqual([200, 400]);
    expect(junk.closed).toBe(true);
    expect(await forwarded()).toEqual(['POST /x']);
  });

  it('a malformed chunk in a body already forwarded: the 400 answers that request, after the answers ahead of it; the origin gets no whole body', async () => {
    const bad = `POST /bad HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${fresh('c')}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\nmore\r\n0\r\n\r\n`;
    for (const ahead of ['', `GET /first HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${fresh('c')}\r\n\r\n`]) {
      origin.clear();
      const wire = await exchange(ahead + bad);
      expect(wire.answers.map((a) => a.status), ahead).toEqual(ahead ? [200, 400] : [400]);
      expect(problemOf(wire.answers.at(-1)!)).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request' });
      expect(wire.closed).toBe(true);
      await new Promise((r) => setTimeout(r, 200));
      await origin.settled();
      expect(origin.requests.filter((r) => r.complete).map((r) => r.path)).toEqual(ahead ? ['/first'] : []);
    }
  });

  it('a body shorter than its Content-Length, then silence: no answer, and the origin never gets a whole request', async () => {
    const wire = await exchange(`POST /short HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${fresh('s')}\r\nContent-Length: 10\r\n\r\nabc`, 1000);
    expect(wire.answers).toEqual([]);
    expect(wire.closed).toBe(false);
    // The client has gone: whatever the origin got of it is not a whole request.
    await new Promise((r) => setTimeout(r, 300));
    await origin.settled();
    expect(origin.requests.filter((r) => r.complete)).toEqual([]);
  });
});
