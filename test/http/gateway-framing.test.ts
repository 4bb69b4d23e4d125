// Request smuggling through the gateway (issue 30, 1a and 1b), on the Node entry (`npm start`) and the
// Worker entry (`npm run dev`, workerd), over raw sockets. For every method, a body that holds a whole
// HTTP request is sent with each client framing (chunked, Content-Length, both, none), with and without
// a Connection header that names a framing header, alone and as the first of two pipelined requests.
// The origin keeps its connections alive and logs every request it parses: it must parse exactly the
// requests the gateway accepted, in order, each with its method, path and body, and never the request
// inside a body. A refused request gets problem+json 4xx and is not charged.
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLoggingOrigin, type LoggingOrigin } from '../support/logging-origin.js';
import { startNodeServer, type NodeServer } from '../support/node-server.js';
import { startDevWorker, type DevWorker } from '../support/worker.js';
import { nodeSend } from '../../functions/app/node-send.js';
import { loadConfig } from '../../functions/app/env.js';
import { buildApp } from '../../functions/app/app.js';
import { memoryStore } from '../../src/index.js';

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'PURGE'];
const FRAMINGS = ['chunked', 'content-length', 'both', 'none'] as const;
type Framing = (typeof FRAMINGS)[number];
/** The Connection header each framing is tried with: it names the framing header(s) sent. */
const CONNECTION: Record<Framing, string> = { chunked: 'transfer-encoding', 'content-length': 'content-length', both: 'content-length, transfer-encoding', none: 'content-length' };
// One token per key: a request that was charged leaves its key refused (429) for the rest of the run.
const POLICIES = JSON.stringify({ gate: { capacity: 1, refillPerSecond: 0.001 } });

/** A whole request, as a body; its key is never charged unless the gateway forwards it as a request. */
const smuggled = (key: string) => `GET /smuggled HTTP/1.1\r\nHost: origin\r\nX-API-KEY: ${key}\r\n\r\n`;

/** A request the client means to send, and what the origin should parse for it when the gateway accepts it. */
interface Meant {
  method: string;
  path: string;
  key: string;
  body: string;
}

interface Case {
  label: string;
  bytes: string;
  /** What a correct gateway parses from `bytes`, in order. */
  meant: Meant[];
}

/**
 * `dropsChunkedGet`: the entry's HTTP server drops a GET or HEAD request's chunked body before the app
 * sees it (workerd does: the Worker gets the request with no body and no Transfer-Encoding), so the
 * gateway cannot refuse it and forwards the request as the Worker received it, bodiless.
 */
function buildCase(n: number, method: string, framing: Framing, connection: boolean, pipelined: boolean, dropsChunkedGet: boolean): Case {
  const key = `k${n}`;
  const inner = smuggled(`never-limited-${n}`);
  const head = [`${method} /item HTTP/1.1`, 'Host: gw', `X-API-KEY: ${key}`, 'Content-Type: text/plain'];
  const length = `Content-Length: ${Buffer.byteLength(inner)}`;
  const chunked = `${Buffer.byteLength(inner).toString(16)}\r\n${inner}\r\n0\r\n\r\n`;
  let body: string;
  if (framing === 'chunked') (head.push('Transfer-Encoding: chunked'), (body = chunked));
  else if (framing === 'content-length') (head.push(length), (body = inner));
  else if (framing === 'both') (head.push(length, 'Transfer-Encoding: chunked'), (body = chunked));
  else body = inner;
  if (connection) head.push(`Connection: ${CONNECTION[framing]}`);
  const meant: Meant[] =
    framing === 'none'
      ? // Without framing the bytes after the head are the client's own next request: the gateway
        // parses, gates and forwards it as one, never as a body.
        [{ method, path: '/item', key, body: '' }, { method: 'GET', path: '/smuggled', key: `never-limited-${n}`, body: '' }]
      : [{ method, path: '/item', key, body: dropsChunkedGet && framing !== 'content-length' && (method === 'GET' || method === 'HEAD') ? '' : inner }];
  let bytes = `${head.join('\r\n')}\r\n\r\n${body}`;
  if (pipelined) {
    bytes += `GET /next HTTP/1.1\r\nHost: gw\r\nX-API-KEY: next-${n}\r\n\r\n`;
    meant.push({ method: 'GET', path: '/next', key: `next-${n}`, body: '' });
  }
  const label = `${method} ${framing}${connection ? ` Connection: ${CONNECTION[framing]}` : ''}${pipelined ? ' + pipelined GET' : ''}`;
  return { label, bytes, meant };
}

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/**
 * Reads whole responses from `data`, one per method in `methods` (a HEAD's has no body). Stops at the
 * first that is incomplete; a response without Content-Length or chunking ends at the close (`closed`).
 */
function parseAnswers(data: Buffer, methods: string[], closed: boolean): Answer[] {
  const answers: Answer[] = [];
  let at = 0;
  for (const method of methods) {
    const end = data.indexOf('\r\n\r\n', at);
    if (end < 0) break;
    const [statusLine, ...lines] = data.subarray(at, end).toString('latin1').split('\r\n');
    const headers: Record<string, string> = {};
    for (const l of lines) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
    const status = Number(statusLine!.split(' ')[1]);
    let pos = end + 4;
    let body: Buffer;
    if (method === 'HEAD' || status === 204 || status === 304) body = Buffer.alloc(0);
    else if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
      const parts: Buffer[] = [];
      for (;;) {
        const lineEnd = data.indexOf('\r\n', pos);
        if (lineEnd < 0) return answers;
        const size = parseInt(data.subarray(pos, lineEnd).toString('latin1'), 16);
        if (data.length < lineEnd + 2 + size + 2) return answers;
        parts.push(data.subarray(lineEnd + 2, lineEnd + 2 + size));
        pos = lineEnd + 2 + size + 2;
        if (size === 0) break;
      }
      body = Buffer.concat(parts);
    } else if (headers['content-length'] !== undefined) {
      const n = Number(headers['content-length']);
      if (data.length < pos + n) break;
      body = data.subarray(pos, pos + n);
      pos += n;
    } else {
      if (!closed) break;
      body = data.subarray(pos);
      pos = data.length;
    }
    answers.push({ status, headers, body });
    at = pos;
  }
  return answers;
}

/** Writes `bytes` on a new connection; resolves with the answers once `methods.length` arrived, the connection closed, or 3 s passed. */
function exchange(port: number, bytes: string, methods: string[]): Promise<Answer[]> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes, 'latin1'));
    let data = Buffer.alloc(0);
    const finish = (closed: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(parseAnswers(data, methods, closed));
    };
    const timer = setTimeout(() => finish(false), 3000);
    socket.on('data', (d: Buffer) => {
      data = Buffer.concat([data, d]);
      if (parseAnswers(data, methods, false).length === methods.length) finish(false);
    });
    socket.on('end', () => finish(true));
    socket.on('error', () => finish(true));
  });
}

/** A refusal as every refusal of ours is: problem+json 4xx. */
const isProblem = (a: Answer) => a.status >= 400 && a.status < 500 && a.headers['content-type'] === 'application/problem+json';

/**
 * Runs every case against the gateway on `port`; returns what went wrong, one line each, and how often
 * each answer came. `keepsHeaders`: also check that an origin answer without Content-Type (the logging
 * origin sends none) reaches the client without one (issue 30, 7a).
 */
async function runCases(port: number, origin: LoggingOrigin, first: number, dropsChunkedGet: boolean, keepsHeaders: boolean): Promise<{ failures: string[]; outcomes: Map<string, number> }> {
  const failures: string[] = [];
  const outcomes = new Map<string, number>();
  let n = first;
  for (const method of METHODS) {
    for (const framing of FRAMINGS) {
      for (const connection of [false, true]) {
        for (const pipelined of [false, true]) {
          const c = buildCase(n++, method, framing, connection, pipelined, dropsChunkedGet);
          origin.clear();
          const answers = await exchange(port, c.bytes, c.meant.map((m) => m.method));
          await origin.settled();
          const fail = (why: string) => failures.push(`${c.label}: ${why}`);
          if (answers.length === 0) fail('no answer');
          const accepted: Meant[] = [];
          answers.forEach((a, i) => {
            const m = c.meant[i]!;
            const key = `${m.method} ${m.path} ${a.status}`;
            outcomes.set(`${framing} ${key}`, (outcomes.get(`${framing} ${key}`) ?? 0) + 1);
            if (a.status === 200) accepted.push(m);
            else if (!isProblem(a)) fail(`${m.method} ${m.path} answered ${a.status} ${a.headers['content-type']} ${a.body.toString('latin1').slice(0, 100)}`);
            if (a.status === 200 && m.method !== 'HEAD' && a.body.toString('latin1') !== `${m.method} ${m.path} ${Buffer.byteLength(m.body)}`) {
              fail(`${m.method} ${m.path} answered 200 with ${JSON.stringify(a.body.toString('latin1').slice(0, 100))}`);
            }
            if (keepsHeaders && a.status === 200 && a.headers['content-type'] !== undefined) fail(`${m.method} ${m.path}: a Content-Type the origin did not send: ${a.headers['content-type']}`);
          });
          // The origin parsed exactly the requests the gateway accepted, with their bodies byte for byte.
          // (In any order: the gateway forwards pipelined requests at once, on connections of its pool.)
          const parsed = origin.requests.map((r) => `${r.method} ${r.path} ${JSON.stringify(r.body.toString('latin1'))}`).sort();
          const expected = accepted.map((m) => `${m.method} ${m.path} ${JSON.stringify(m.body)}`).sort();
          if (JSON.stringify(parsed) !== JSON.stringify(expected)) fail(`origin parsed [${parsed.join(' | ')}], the gateway accepted [${expected.join(' | ')}]`);
          if (origin.parseErrors.length > 0) fail(`the origin's parser failed: ${JSON.stringify(origin.parseErrors)}`);
          // What reached the origin as /smuggled was forwarded as a request of its own (the gateway's X-Forwarded-For).
          for (const r of origin.requests) if (r.path === '/smuggled' && r.headers['x-forwarded-for'] === undefined) fail('/smuggled reached the origin unforwarded');
          // A request refused or never answered was not charged: its key still has its one token.
          for (const m of c.meant.filter((m) => !accepted.includes(m))) {
            const [check] = await exchange(port, `GET /check HTTP/1.1\r\nHost: gw\r\nX-API-KEY: ${m.key}\r\nConnection: close\r\n\r\n`, ['GET']);
            if (check?.status !== 200) fail(`${m.method} ${m.path} was not forwarded but its key was charged (a check got ${check?.status})`);
          }
        }
      }
    }
  }
  return { failures, outcomes };
}

describe('gateway framing: the origin parses one request per request the gateway accepts', () => {
  let origin: LoggingOrigin;
  beforeAll(async () => {
    origin = await startLoggingOrigin();
  });
  afterAll(() => origin.close());

  describe('Node entry (npm start)', () => {
    let server: NodeServer;
    beforeAll(async () => {
      server = await startNodeServer({ LIMITER_STORE: 'memory', LIMITER_POLICIES: POLICIES, GATE_ORIGIN: origin.url, GATE_POLICY: 'gate', GATE_KEY: 'header:x-api-key' });
    });
    afterAll(() => server?.stop());

    it('every method × framing × Connection × pipelining', { timeout: 120_000 }, async () => {
      // Not `keepsHeaders` yet: @hono/node-server gives a response without Content-Type its default.
      const { failures, outcomes } = await runCases(server.port, origin, 0, false, true);
      console.log('[node]', JSON.stringify(Object.fromEntries(outcomes)));
      expect(failures).toEqual([]);
      // The cases did reach the origin: each method's framed body was forwarded.
      for (const method of METHODS.filter((m) => m !== 'GET' && m !== 'HEAD')) {
        for (const framing of ['chunked', 'content-length']) expect(outcomes.get(`${framing} ${method} /item 200`), `${method} ${framing}`).toBe(4);
      }
    });
  });

  describe('Worker entry (npm run dev, workerd)', () => {
    let dev: DevWorker;
    beforeAll(async () => {
      dev = await startDevWorker({ LIMITER_STORE: 'memory', LIMITER_POLICIES: POLICIES, GATE_ORIGIN: origin.url, GATE_POLICY: 'gate', GATE_KEY: 'header:x-api-key' });
    }, 120_000);
    afterAll(() => dev?.stop());

    it('every method × framing × Connection × pipelining', { timeout: 180_000 }, async () => {
      const port = Number(new URL(dev.url).port);
      const { failures, outcomes } = await runCases(port, origin, 10_000, true, true);
      console.log('[worker]', JSON.stringify(Object.fromEntries(outcomes)));
      expect(failures).toEqual([]);
      for (const method of METHODS.filter((m) => m !== 'GET' && m !== 'HEAD')) {
        for (const framing of ['chunked', 'content-length']) expect(outcomes.get(`${framing} ${method} /item 200`), `${method} ${framing}`).toBe(4);
      }
    });
  });
});

describe('nodeSend (the Node and Lambda transport) frames every body itself', () => {
  let origin: LoggingOrigin;
  beforeAll(async () => {
    origin = await startLoggingOrigin();
  });
  afterAll(() => origin.close());

  const inner = smuggled('never-limited');
  const stream = (text: string) => new Response(text).body!;
  const send = (method: string, body: string | null, length: number | null, headers: Record<string, string> = {}) =>
    nodeSend(`${origin.url}/item`, { method, headers: new Headers(headers), body: body === null ? null : stream(body), length, signal: new AbortController().signal });

  it('chunked or with its length, for every method; framing headers from the caller are ignored', async () => {
    for (const method of ['POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'PURGE']) {
      for (const length of [null, Buffer.byteLength(inner)]) {
        origin.clear();
        // A caller's framing headers would frame the body wrongly: the transport sets its own.
        const res = await send(method, inner, length, { 'content-length': '0', 'transfer-encoding': 'identity' });
        expect(await res.text()).toBe(`${method} /item ${Buffer.byteLength(inner)}`);
        await origin.settled();
        expect(origin.requests.map((r) => [r.method, r.path, r.body.toString('latin1'), r.headers['content-length'], r.headers['transfer-encoding']])).toEqual([
          [method, '/item', inner, length === null ? undefined : String(length), length === null ? 'chunked' : undefined],
        ]);
      }
    }
  });

  it('a body longer or shorter than its length fails the forward; nothing after the length reaches the origin', async () => {
    for (const [length, label] of [[5, 'longer'], [Buffer.byteLength(inner) + 10, 'shorter']] as const) {
      origin.clear();
      await expect(send('DELETE', inner, length), label).rejects.toThrow();
      await origin.settled();
      // The connection is closed, not reused: the request is incomplete or never parsed, and no other follows.
      expect(origin.requests.filter((r) => r.complete || r.path !== '/item'), label).toEqual([]);
      const res = await send('GET', null, 0);
      expect(await res.text(), label).toBe('GET /item 0');
      await origin.settled();
      expect(origin.requests.filter((r) => r.path === '/smuggled'), label).toEqual([]);
    }
  });
});

describe('refuse(): framing a server may let through is refused before the limiter charges', () => {
  // Node's parser and workerd refuse or resolve these themselves; a Lambda event, or a server of the
  // library's user, may hand them to the gateway.
  let origin: LoggingOrigin;
  beforeAll(async () => {
    origin = await startLoggingOrigin();
  });
  afterAll(() => origin.close());

  it('a GET or HEAD with a body, both framing fields, a Content-Length that is no byte count: 400, key uncharged', async () => {
    const config = loadConfig({ LIMITER_POLICIES: POLICIES, GATE_ORIGIN: origin.url, GATE_POLICY: 'gate', GATE_KEY: 'header:x-api-key' });
    const { app } = buildApp(config, memoryStore(), { log: () => {}, send: nodeSend });
    const cases: [string, Record<string, string>][] = [
      ['GET', { 'content-length': '5' }],
      ['GET', { 'transfer-encoding': 'chunked' }],
      ['HEAD', { 'content-length': '1' }],
      ['DELETE', { 'content-length': '5', 'transfer-encoding': 'chunked' }],
      ['POST', { 'content-length': '-1' }],
      ['POST', { 'content-length': '1e3' }],
      ['POST', { 'content-length': '5, 5' }],
      ['PUT', { 'content-length': '0x5' }],
    ];
    for (const [i, [method, framing]] of cases.entries()) {
      const label = `${method} ${JSON.stringify(framing)}`;
      const res = await app.request('http://gw/item', { method, headers: { host: 'gw', 'x-api-key': `r${i}`, ...framing } });
      expect(res.status, label).toBe(400);
      expect(res.headers.get('content-type'), label).toBe('application/problem+json');
      // Not charged: the key's one token is still there.
      expect((await app.request('http://gw/check', { headers: { host: 'gw', 'x-api-key': `r${i}` } })).status, label).toBe(200);
    }
    await origin.settled();
    expect(origin.requests.map((r) => `${r.method} ${r.path}`)).toEqual(cases.map(() => 'GET /check'));
    // A GET with Content-Length: 0 has no body: forwarded.
    expect((await app.request('http://gw/empty', { headers: { host: 'gw', 'x-api-key': 'r-empty', 'content-length': '0' } })).status).toBe(200);
  });
});
