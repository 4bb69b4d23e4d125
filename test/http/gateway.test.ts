// Gateway mode as an HTTP proxy, end to end: a real Node server (what `npm start` serves) in front of a
// real origin, driven by raw HTTP/1.1 requests so hop-by-hop headers and Expect can be sent as clients do.
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import { gunzipSync, gzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { serve, type ServerType } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../functions/app/env.js';
import { buildApp } from '../../functions/app/app.js';
import { memoryStore, type Store } from '../../src/index.js';
import { CLAIM_PREFIXES, CLIENT_CLAIMS, createForwarder, isClientClaim } from '../../src/http/gateway.js';
import { nodeSend } from '../../functions/app/node-send.js';
import { Hono } from 'hono';

type Seen = { method: string; url: string; headers: IncomingHttpHeaders; body: string; bytes: number; sha256: string };
const seen: Seen[] = [];
/** Requests whose body the origin started to receive but that never completed (the gateway aborted them). */
let cutOff = 0;
let origin: Server;
let originUrl: string;
const servers: ServerType[] = [];

beforeAll(async () => {
  origin = createServer((req, res) => {
    let body = '';
    let bytes = 0;
    const hash = createHash('sha256');
    req.on('data', (d: Buffer) => {
      bytes += d.length;
      hash.update(d);
      if (body.length < 100_000) body += d;
    });
    req.on('close', () => {
      if (!req.complete) cutOff++;
    });
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body, bytes, sha256: hash.digest('hex') });
      if (req.url === '/teapot') {
        res.writeHead(418, { 'Content-Type': 'text/plain' });
        return res.end('short and stout');
      }
      if (req.url === '/redirect') {
        res.writeHead(302, { Location: '/elsewhere' });
        return res.end();
      }
      if (req.url === '/slow') {
        const t = setTimeout(() => res.end('late'), 3000);
        res.on('close', () => clearTimeout(t));
        return;
      }
      if (req.url === '/gzip') {
        res.writeHead(200, { 'Content-Encoding': 'gzip', 'Content-Type': 'text/plain' });
        return res.end(gzipSync('hello, decoded'));
      }
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Keep-Alive': 'timeout=5', 'X-Hop': 'origin-private', Connection: 'X-Hop', 'Proxy-Authenticate': 'Basic', 'X-End': 'kept' });
      res.end(`origin saw ${req.method} ${req.url} ${body}`);
    });
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', () => r()));
  originUrl = `http://127.0.0.1:${(origin.address() as { port: number }).port}`;
});
afterAll(async () => {
  for (const s of servers) s.close();
  await new Promise<void>((r) => origin.close(() => r()));
});

/** A store that records every storage key it is asked about. */
function recording(): Store & { keys: string[] } {
  const inner = memoryStore();
  const keys: string[] = [];
  return { name: 'memory', keys, step: (k, a) => (keys.push(k), inner.step(k, a)), reset: (k) => inner.reset(k), ping: async () => {} };
}

/**
 * `transport`: `node` is what the Node and Lambda entries pass (node-send.ts); `fetch` is the default,
 * what the Worker uses.
 */
const gateway = (env: Record<string, string>, store?: Store) => gatewayVia(env, store);
async function gatewayVia(env: Record<string, string>, store: Store = memoryStore(), transport: 'node' | 'fetch' = 'node'): Promise<number> {
  const config = loadConfig({ LIMITER_POLICIES: JSON.stringify({ gate: { capacity: 100, refillPerSecond: 1 } }), GATE_ORIGIN: originUrl, ...env });
  const { app } = buildApp(config, store, { log: () => {}, ...(transport === 'node' ? { send: nodeSend } : {}) });
  return new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
    servers.push(s);
  });
}

type Reply = { status: number; headers: IncomingHttpHeaders; body: string };
/** `from`: the client's own address (any of 127.0.0.0/8 on Linux), to play a proxy the gateway trusts. */
/** `chunks`: the body written piece by piece with no Content-Length (chunked), instead of `body`. */
function send(port: number, path: string, opts: { method?: string; headers?: Record<string, string>; body?: string | Buffer; chunks?: Buffer[]; expectContinue?: boolean; from?: string } = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: opts.method ?? 'GET', headers: opts.headers, agent: false, localAddress: opts.from }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    if (opts.expectContinue) req.on('continue', () => req.end(opts.body));
    else if (opts.chunks) {
      for (const chunk of opts.chunks) req.write(chunk);
      req.end();
    } else req.end(opts.body);
  });
}

for (const transport of ['node', 'fetch'] as const) describe(`gateway mode is a correct HTTP proxy (${transport})`, () => {
  const gateway = (env: Record<string, string>, store?: Store) => gatewayVia(env, store, transport);

  it('gates every path outside /v1 and /healthz, and passes method, query, body and status through', async () => {
    const port = await gateway({
      // A slow refill: the third request is refused however long the machine takes between the three
      // (at 1/s, one run under load took over a second and got a token back).
      LIMITER_POLICIES: JSON.stringify({ gate: { capacity: 2, refillPerSecond: 0.25 } }),
      PERMIT_TOKENS: 't',
      GATE_POLICY: 'gate',
      GATE_KEY: 'header:x-client',
    });
    const h = { 'x-client': 'c1', 'content-type': 'text/plain' };
    const before = seen.length;
    const a = await send(port, '/items?q=1', { method: 'PUT', headers: h, body: 'payload' });
    expect(a.status).toBe(200);
    expect(a.body).toBe('origin saw PUT /items?q=1 payload');
    expect(a.headers.ratelimit).toBe('"gate";r=1;t=4');
    expect((await send(port, '/teapot', { headers: h })).status).toBe(418);
    const c = await send(port, '/items', { headers: h });
    expect(c.status).toBe(429);
    // A token comes back 4 s after the second take: 4 s less however long the third took to arrive.
    expect(Number(c.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(Number(c.headers['retry-after'])).toBeLessThanOrEqual(4);
    expect(seen.length - before).toBe(2);
    // The permit API and health are not gated.
    expect((await send(port, '/healthz')).status).toBe(200);
    expect((await send(port, '/v1/buckets/gate/anything', { headers: { Authorization: 'Bearer t' } })).status).toBe(200);
  });


  it('forwards end-to-end headers only, and says who the client is instead of what it claims', async () => {
    const port = await gateway({});
    const r = await send(port, '/echo?x=1', {
      method: 'POST',
      headers: {
        Connection: 'keep-alive, X-Per-Hop',
        'X-Per-Hop': 'must not pass',
        'Keep-Alive': 'timeout=5',
        TE: 'trailers',
        Trailer: 'X-Checksum',
        'Proxy-Authorization': 'Basic c2VjcmV0',
        'Proxy-Connection': 'keep-alive',
        'X-Forwarded-For': '6.6.6.6',
        'X-Forwarded-Proto': 'https',
        'X-Custom': 'kept',
        Authorization: 'Bearer end-to-end',
        'Content-Type': 'text/plain',
      },
      body: 'payload',
    });
    expect(r.status).toBe(200);
    expect(r.body).toBe('origin saw POST /echo?x=1 payload');
    const h = seen.at(-1)!.headers;
    for (const name of ['x-per-hop', 'keep-alive', 'te', 'trailer', 'proxy-authorization', 'proxy-connection']) expect(h[name], name).toBeUndefined();
    expect(h['x-custom']).toBe('kept');
    expect(h.authorization).toBe('Bearer end-to-end');
    // The client is not a trusted proxy: its X-Forwarded-* claims are replaced by what we saw.
    expect(h['x-forwarded-for']).toBe('127.0.0.1');
    expect(h['x-forwarded-proto']).toBe('http');
    expect(h['x-forwarded-host']).toBe(`127.0.0.1:${port}`);
    expect(h.host).toBe(new URL(originUrl).host);
    // And on the way back: the origin's hop-by-hop headers stay with the origin.
    expect(r.headers['x-hop']).toBeUndefined();
    expect(r.headers['proxy-authenticate']).toBeUndefined();
    expect(r.headers['x-end']).toBe('kept');
    expect(r.headers['ratelimit-policy']).toBe('"gate";q=100;w=100');
  });

  it('Expect: 100-continue is answered by the gateway and the body reaches the origin (not a 502)', async () => {
    const port = await gateway({});
    const r = await send(port, '/upload', { method: 'PUT', headers: { Expect: '100-continue', 'Content-Type': 'text/plain', 'Content-Length': '4' }, body: 'data', expectContinue: true });
    expect(r.status).toBe(200);
    expect(r.body).toBe('origin saw PUT /upload data');
    expect(seen.at(-1)!.headers.expect).toBeUndefined();
  });

  it("the client sees the origin's redirect itself (redirect: manual)", async () => {
    const port = await gateway({});
    const r = await send(port, '/redirect');
    expect(r.status).toBe(302);
    expect(r.headers.location).toBe('/elsewhere');
    expect(seen.filter((s) => s.url === '/elsewhere')).toHaveLength(0);
  });

  it('an origin slower than GATE_TIMEOUT_MS answers 504 problem+json; an unreachable one 502', async () => {
    const port = await gateway({ GATE_TIMEOUT_MS: '200' });
    const t0 = performance.now();
    const r = await send(port, '/slow');
    expect(performance.now() - t0).toBeLessThan(200 + 700);
    expect(r.status).toBe(504);
    expect(r.headers['content-type']).toBe('application/problem+json');
    expect(JSON.parse(r.body)).toMatchObject({ type: 'urn:edge-limiter:problem:gateway-timeout', status: 504 });
    const closed = await new Promise<number>((resolve) => {
      const s = createServer();
      s.listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const dead = await send(await gateway({ GATE_ORIGIN: `http://127.0.0.1:${closed}` }), '/x');
    expect(dead.status).toBe(502);
    expect(JSON.parse(dead.body)).toMatchObject({ type: 'urn:edge-limiter:problem:bad-gateway' });
  });

  it('TRACE, TRACK and CONNECT cannot be forwarded: 501 problem+json before the limiter charges anything', async () => {
    const store = recording();
    const env = { LIMITER_POLICIES: JSON.stringify({ gate: { capacity: 1, refillPerSecond: 0.001 } }) };
    const port = await gateway(env, store);
    const before = seen.length;
    const r = await send(port, '/trace-me', { method: 'TRACE', headers: { Authorization: 'Bearer secret' } });
    expect(r.status).toBe(501);
    expect(r.headers['content-type']).toBe('application/problem+json');
    expect(JSON.parse(r.body)).toMatchObject({ type: 'urn:edge-limiter:problem:method-not-implemented', status: 501 });
    expect(r.body).not.toContain('secret');
    // Node's parser knows no TRACK and answers CONNECT apart, so those are sent to the app as Node's
    // adapter would (a request whose method reads as given).
    const { app } = buildApp(loadConfig({ ...env, GATE_ORIGIN: originUrl }), store, { log: () => {} });
    for (const method of ['CONNECT', 'TRACK', 'trace']) {
      const req = new Request(`http://gw.test/${method}`);
      Object.defineProperty(req, 'method', { get: () => method });
      const res = await app.fetch(req, { incoming: { socket: { remoteAddress: '127.0.0.1' } } });
      expect(res.status, method).toBe(501);
      expect(await res.json()).toMatchObject({ type: 'urn:edge-limiter:problem:method-not-implemented' });
    }
    // Nothing reached the origin or the store: the one token is still there.
    expect(seen.length).toBe(before);
    expect(store.keys).toEqual([]);
    expect((await send(port, '/after')).status).toBe(200);
    expect(store.keys).toEqual(['el:gate:127.0.0.1']);
  });

  if (transport === 'fetch') {
    it('a compressed origin response arrives decoded, without a stale Content-Encoding', async () => {
      const port = await gateway({});
      const r = await send(port, '/gzip', { headers: { 'Accept-Encoding': 'gzip' } });
      expect(r.status).toBe(200);
      expect(r.headers['content-encoding']).toBeUndefined();
      expect(r.body).toBe('hello, decoded');
    });
  } else {
    it('a compressed origin response arrives as the origin sent it, for the client to decode', async () => {
      const port = await gateway({});
      const r = await new Promise<{ encoding: string | undefined; body: Buffer }>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port, path: '/gzip', headers: { 'Accept-Encoding': 'gzip' }, agent: false }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (d: Buffer) => chunks.push(d));
          res.on('end', () => resolve({ encoding: res.headers['content-encoding'], body: Buffer.concat(chunks) }));
        });
        req.on('error', reject);
        req.end();
      });
      expect(seen.at(-1)!.headers['accept-encoding']).toBe('gzip');
      expect(r.encoding).toBe('gzip');
      expect(gunzipSync(r.body).toString()).toBe('hello, decoded');
    });
  }
});

for (const transport of ['node', 'fetch'] as const) describe(`request bodies (${transport})`, () => {
  const gateway = (env: Record<string, string>, store?: Store) => gatewayVia(env, store, transport);
  const bytes = (n: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7919) % 251));
  const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

  it('a body reaches the origin byte for byte, with a Content-Length or chunked', async () => {
    const port = await gateway({});
    const body = bytes(3_000_000);
    expect((await send(port, '/up', { method: 'POST', body })).status).toBe(200);
    expect(seen.at(-1)).toMatchObject({ bytes: body.length, sha256: sha256(body) });
    expect(seen.at(-1)!.headers['content-length']).toBe(String(body.length));
    const chunks = [bytes(100_000), bytes(1), bytes(65_536)];
    expect((await send(port, '/up', { method: 'PUT', chunks })).status).toBe(200);
    expect(seen.at(-1)).toMatchObject({ method: 'PUT', bytes: 165_537, sha256: sha256(Buffer.concat(chunks)) });
  });

  it('GATE_MAX_BODY_BYTES: a larger Content-Length gets 413 problem+json before the limiter charges; one at the limit passes', async () => {
    const store = recording();
    const port = await gateway({ GATE_MAX_BODY_BYTES: '1000' }, store);
    const before = seen.length;
    const r = await send(port, '/up', { method: 'POST', body: bytes(1001) });
    expect(r.status).toBe(413);
    expect(r.headers['content-type']).toBe('application/problem+json');
    expect(JSON.parse(r.body)).toMatchObject({ type: 'urn:edge-limiter:problem:payload-too-large', status: 413 });
    expect(seen.length).toBe(before);
    expect(store.keys).toEqual([]);
    expect((await send(port, '/up', { method: 'POST', body: bytes(1000) })).status).toBe(200);
    expect(seen.at(-1)).toMatchObject({ bytes: 1000 });
  });

  it('GATE_MAX_BODY_BYTES: a body that streams past the limit without a Content-Length is cut off, the forward aborted, and the answer is 413', async () => {
    const port = await gateway({ GATE_MAX_BODY_BYTES: '100000' });
    const [seenBefore, cutBefore] = [seen.length, cutOff];
    const r = await send(port, '/up', { method: 'POST', chunks: Array.from({ length: 20 }, () => bytes(16_384)) });
    expect(r.status).toBe(413);
    expect(r.headers['content-type']).toBe('application/problem+json');
    expect(JSON.parse(r.body)).toMatchObject({ type: 'urn:edge-limiter:problem:payload-too-large', status: 413 });
    // The body was streamed as it came, so the origin saw the upload begin, then end unfinished: no
    // complete request reached it.
    expect(seen.length).toBe(seenBefore);
    await expect.poll(() => cutOff - cutBefore).toBe(1);
    // Chunked bodies within the limit pass whole.
    const ok = Array.from({ length: 6 }, () => bytes(16_384));
    expect((await send(port, '/up', { method: 'POST', chunks: ok })).status).toBe(200);
    expect(seen.at(-1)).toMatchObject({ bytes: 6 * 16_384, sha256: sha256(Buffer.concat(ok)) });
  });
});

describe('GATE_MAX_BODY_BYTES and maxBodyBytes', () => {
  it('must be a non-negative integer; the error names the variable', () => {
    const base = { GATE_ORIGIN: 'https://o.example' };
    for (const bad of ['-1', '1e6', '10MB', '9007199254740992']) {
      expect(() => loadConfig({ ...base, GATE_MAX_BODY_BYTES: bad }), bad).toThrow(/invalid config: GATE_MAX_BODY_BYTES must be an integer from 0 to/);
    }
    expect(loadConfig({ ...base, GATE_MAX_BODY_BYTES: '0' }).gate).toMatchObject({ maxBodyBytes: 0 });
    expect(loadConfig(base).gate).not.toHaveProperty('maxBodyBytes');
    for (const bad of [-1, 1.5, Number.NaN]) expect(() => createForwarder({ origin: 'http://o', maxBodyBytes: bad }), String(bad)).toThrow(/maxBodyBytes/);
  });
});

describe('forwarding headers carry what the gateway knows, never what a client wrote', () => {
  // Every header CLIENT_CLAIMS names, one by one.
  const named = {
    Forwarded: 'for=6.6.6.6;proto=https;host=evil.example',
    'Forwarded-For': '6.6.6.6',
    'X-Forwarded': 'for=6.6.6.6',
    'Front-End-Https': 'on',
    'X-Url-Scheme': 'https',
    'X-Scheme': 'https',
    'X-Client-IP': '6.6.6.6',
    'X-Client-Port': '443',
    'X-Originating-IP': '6.6.6.6',
    'X-Remote-Addr': '6.6.6.6',
    'X-Remote-IP': '6.6.6.6',
    'Client-IP': '6.6.6.6',
    'True-Client-IP': '6.6.6.6',
    'Fastly-Client-IP': '6.6.6.6',
    'Fly-Client-IP': '6.6.6.6',
    'X-ProxyUser-IP': '6.6.6.6',
    'X-AppEngine-User-IP': '6.6.6.6',
    'X-Azure-ClientIP': '6.6.6.6',
    'X-Azure-SocketIP': '6.6.6.6',
    'X-Host': 'evil.example',
    'X-Rewrite-URL': '/admin',
    'Client-Cert': ':MIIB:',
    'Client-Cert-Chain': ':MIIB:',
    'SSL-Client-Cert': 'MIIB',
    'X-SSL-Client-Cert': 'MIIB',
    'X-Client-Cert': 'MIIB',
  };
  // Members of each CLAIM_PREFIXES family, the known ones and some no list would name.
  const family = {
    'X-Forwarded-For': '6.6.6.6',
    'X-Forwarded-Proto': 'https',
    'X-Forwarded-Host': 'evil.example',
    'X-Forwarded-Port': '443',
    'X-Forwarded-Prefix': '/evil',
    'X-Forwarded-Server': 'evil.example',
    'X-Forwarded-Scheme': 'https',
    'X-Forwarded-Ssl': 'on',
    'X-Forwarded-URI': '/admin',
    'X-Forwarded-Protocol': 'https',
    'X-Forwarded-Hostname': 'evil.example',
    'X-Forwarded-Path': '/admin',
    'X-Forwarded-Client-Cert': 'By=spiffe://evil',
    'X-Original-Forwarded-For': '6.6.6.6',
    'X-Original-Host': 'evil.example',
    'X-Original-URL': '/admin',
    'X-Original-URI': '/admin',
    'X-Envoy-External-Address': '6.6.6.6',
    'X-Envoy-Original-Path': '/admin',
    'X-Envoy-Internal': 'true',
    'X-Real-IP': '6.6.6.6',
    'X-Real-Port': '443',
    'X-Cluster-Client-IP': '6.6.6.6',
    'X-Cluster-Client-Port': '443',
    'CF-Connecting-IP': '6.6.6.6',
    'CF-Connecting-IPv6': '2001:db8::666',
    'CF-Pseudo-IPv4': '6.6.6.6',
    'CF-Visitor': '{"scheme":"https"}',
  };
  // Each of them again with `_` for `-` (x_forwarded_for, cf_connecting_ip, ...), as a CGI-style origin reads them.
  const underscored = Object.fromEntries(Object.entries({ ...named, ...family }).map(([name, value]) => [name.toLowerCase().replace(/-/g, '_'), value]));
  const claims = { ...named, ...family, ...underscored };
  // What must not reach the origin as the client wrote it: every claim but the four the gateway sets again.
  const dropped = Object.keys(claims)
    .map((name) => name.toLowerCase())
    .filter((name) => !['x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-real-ip'].includes(name));

  it('the names sent here are CLIENT_CLAIMS, and every CLAIM_PREFIXES family has members here', () => {
    expect(Object.keys(named).map((name) => name.toLowerCase()).sort()).toEqual([...CLIENT_CLAIMS].sort());
    for (const prefix of CLAIM_PREFIXES) expect(Object.keys(family).some((name) => name.toLowerCase().startsWith(prefix)), prefix).toBe(true);
    for (const name of Object.keys(family)) expect(CLAIM_PREFIXES.some((prefix) => name.toLowerCase().startsWith(prefix)), name).toBe(true);
    for (const name of Object.keys(claims)) expect(isClientClaim(name), name).toBe(true);
    for (const name of ['x-custom', 'x-forwardedfor', 'accept', 'x-cfg', 'content-type', 'x-client-id', 'x_client_version']) expect(isClientClaim(name), name).toBe(false);
  });

  it('docs/gateway.md names exactly CLAIM_PREFIXES and CLIENT_CLAIMS, and the underscore rule', () => {
    const doc = readFileSync('docs/gateway.md', 'utf8').replace(/\s+/g, ' ');
    expect(doc).toContain('compared case-insensitively with `_` read as `-`');
    const prefixes = /every header whose name starts with (.*?)(?: \(such as [^)]*\))?, and these:/.exec(doc)?.[1];
    expect(prefixes).toBeDefined();
    expect([...prefixes!.matchAll(/`([^`]+)`/g)].map(([, p]) => p!.toLowerCase()).sort()).toEqual([...CLAIM_PREFIXES].sort());
    const list = /, and these: (.*?); any other header goes through/.exec(doc)?.[1];
    expect(list).toBeDefined();
    // `A`, `B`/`-C` (B's prefix with C), and `D`
    const listed = [...list!.matchAll(/`([^`]+)`((?:\/`-[^`]+`)*)/g)].flatMap(([, first, more]) => {
      const stem = first!.slice(0, first!.lastIndexOf('-'));
      return [first!, ...[...more!.matchAll(/`(-[^`]+)`/g)].map(([, suffix]) => stem + suffix)];
    });
    expect(listed.map((n) => n.toLowerCase()).sort()).toEqual([...CLIENT_CLAIMS].sort());
  });

  it('from an untrusted client: X-Forwarded-*, X-Real-IP are the peer and our own scheme and Host; every other claim is dropped', async () => {
    for (const env of [{}, { GATE_TRUSTED_PROXIES: '127.0.0.5' }] as Record<string, string>[]) {
      const port = await gateway(env);
      expect((await send(port, '/claims', { headers: { ...claims, 'X-Custom': 'kept' } })).status).toBe(200);
      const h = seen.at(-1)!.headers;
      expect(h['x-forwarded-for']).toBe('127.0.0.1');
      expect(h['x-real-ip']).toBe('127.0.0.1');
      expect(h['x-forwarded-proto']).toBe('http');
      expect(h['x-forwarded-host']).toBe(`127.0.0.1:${port}`);
      for (const name of dropped) expect(h[name], name).toBeUndefined();
      expect(h['x-custom']).toBe('kept');
    }
  });

  it('through the trusted proxy 127.0.0.5: X-Forwarded-Proto is the entry the proxy wrote, X-Forwarded-Host is Host', async () => {
    const port = await gateway({ GATE_TRUSTED_PROXIES: '127.0.0.5' });
    // The client wrote `https` and X-Forwarded-Host; the proxy appended the client's address and `http`.
    await send(port, '/p', { from: '127.0.0.5', headers: { ...claims, 'X-Forwarded-For': '6.6.6.6, 203.0.113.7', 'X-Forwarded-Proto': 'https, http', 'X-Forwarded-Host': 'evil.example' } });
    const h = seen.at(-1)!.headers;
    expect(h['x-forwarded-for']).toBe('203.0.113.7, 127.0.0.5');
    expect(h['x-real-ip']).toBe('203.0.113.7');
    expect(h['x-forwarded-proto']).toBe('http');
    expect(h['x-forwarded-host']).toBe(`127.0.0.1:${port}`);
    for (const name of dropped) expect(h[name], name).toBeUndefined();
    // A proxy that sets the header (one entry) is believed; a value that is no scheme is not.
    await send(port, '/p', { from: '127.0.0.5', headers: { 'X-Forwarded-For': '203.0.113.7', 'X-Forwarded-Proto': 'HTTPS' } });
    expect(seen.at(-1)!.headers['x-forwarded-proto']).toBe('https');
    await send(port, '/p', { from: '127.0.0.5', headers: { 'X-Forwarded-For': '203.0.113.7', 'X-Forwarded-Proto': 'javascript' } });
    expect(seen.at(-1)!.headers['x-forwarded-proto']).toBe('http');
  });

  it('through two trusted proxies: the entry the first of them wrote, counted from the right like X-Forwarded-For', async () => {
    const port = await gateway({ GATE_TRUSTED_PROXIES: '127.0.0.5, 10.0.0.0/8' });
    // client --https--> 10.0.0.2 --http--> 127.0.0.5 --> gateway; the client itself wrote `http` first.
    await send(port, '/p', { from: '127.0.0.5', headers: { 'X-Forwarded-For': '198.51.100.9, 203.0.113.7, 10.0.0.2', 'X-Forwarded-Proto': 'http, https, http' } });
    let h = seen.at(-1)!.headers;
    expect(h['x-forwarded-for']).toBe('203.0.113.7, 10.0.0.2, 127.0.0.5');
    expect(h['x-forwarded-proto']).toBe('https');
    // Proxies that set the header rather than append: only the last one's value is left, and it counts.
    await send(port, '/p', { from: '127.0.0.5', headers: { 'X-Forwarded-For': '203.0.113.7, 10.0.0.2', 'X-Forwarded-Proto': 'https' } });
    h = seen.at(-1)!.headers;
    expect(h['x-forwarded-proto']).toBe('https');
  });

  it('GATE_TRUST_FORWARDED_HOST=true: the host the first trusted proxy wrote, and only through one', async () => {
    const port = await gateway({ GATE_TRUSTED_PROXIES: '127.0.0.5', GATE_TRUST_FORWARDED_HOST: 'true' });
    await send(port, '/h', { from: '127.0.0.5', headers: { 'X-Forwarded-For': '203.0.113.7', 'X-Forwarded-Host': 'evil.example, api.example.com' } });
    expect(seen.at(-1)!.headers['x-forwarded-host']).toBe('api.example.com');
    await send(port, '/h', { from: '127.0.0.5', headers: { 'X-Forwarded-For': '203.0.113.7', 'X-Forwarded-Host': 'api.example.com:8443' } });
    expect(seen.at(-1)!.headers['x-forwarded-host']).toBe('api.example.com:8443');
    // Not a host: the Host header instead.
    await send(port, '/h', { from: '127.0.0.5', headers: { 'X-Forwarded-For': '203.0.113.7', 'X-Forwarded-Host': 'evil.example/path' } });
    expect(seen.at(-1)!.headers['x-forwarded-host']).toBe(`127.0.0.1:${port}`);
    // From a client that is not a trusted proxy, the header is the client's: Host instead.
    await send(port, '/h', { headers: { 'X-Forwarded-For': '203.0.113.7', 'X-Forwarded-Host': 'evil.example' } });
    expect(seen.at(-1)!.headers['x-forwarded-host']).toBe(`127.0.0.1:${port}`);
  });

  it('on Workers, CF-Connecting-IP is set from the platform’s value (canonical), with X-Forwarded-For and X-Real-IP', async () => {
    let sent: Headers | undefined;
    const forward = createForwarder({ origin: 'http://origin.test', fetch: async (input, init) => ((sent = new Headers(input instanceof Request ? input.headers : init?.headers)), new Response('ok')) });
    const app = new Hono();
    app.all('*', (c) => forward(c));
    const req = new Request('https://gw.example/x', { headers: { 'CF-Connecting-IP': '::ffff:203.0.113.8', 'CF-Connecting-IPv6': '2001:db8::666', 'True-Client-IP': '6.6.6.6' } });
    Object.defineProperty(req, 'cf', { value: { colo: 'AMS' } });
    expect((await app.fetch(req)).status).toBe(200);
    expect(sent!.get('cf-connecting-ip')).toBe('203.0.113.8');
    expect(sent!.get('x-forwarded-for')).toBe('203.0.113.8');
    expect(sent!.get('x-real-ip')).toBe('203.0.113.8');
    expect(sent!.get('x-forwarded-proto')).toBe('https');
    expect(sent!.has('cf-connecting-ipv6')).toBe(false);
    expect(sent!.has('true-client-ip')).toBe(false);
    // Not on Workers, CF-Connecting-IP is just a header a client wrote.
    await app.request('/x', { headers: { 'CF-Connecting-IP': '203.0.113.8' } }, { incoming: { socket: { remoteAddress: '192.0.2.1' } } });
    expect(sent!.has('cf-connecting-ip')).toBe(false);
    expect(sent!.get('x-forwarded-for')).toBe('192.0.2.1');
  });

  it('GATE_TRUST_FORWARDED_HOST must be true or false, and needs GATE_TRUSTED_PROXIES', () => {
    const base = { GATE_ORIGIN: 'https://o.example' };
    expect(() => loadConfig({ ...base, GATE_TRUST_FORWARDED_HOST: 'yes', GATE_TRUSTED_PROXIES: '10.0.0.0/8' })).toThrow(/invalid config: GATE_TRUST_FORWARDED_HOST must be "true" or "false"/);
    expect(() => loadConfig({ ...base, GATE_TRUST_FORWARDED_HOST: 'true' })).toThrow(/invalid config: GATE_TRUST_FORWARDED_HOST needs GATE_TRUSTED_PROXIES/);
    expect(loadConfig({ ...base, GATE_TRUST_FORWARDED_HOST: 'true', GATE_TRUSTED_PROXIES: '10.0.0.0/8' }).gate).toMatchObject({ trustForwardedHost: true });
    expect(loadConfig({ ...base, GATE_TRUST_FORWARDED_HOST: 'false' }).gate).not.toHaveProperty('trustForwardedHost');
  });
});

describe('gateway keys', () => {
  it('GATE_TRUSTED_PROXIES: only a trusted peer makes X-Forwarded-For count; the right-most untrusted hop is the client', async () => {
    const store = recording();
    const port = await gateway({ GATE_TRUSTED_PROXIES: '127.0.0.0/8, 10.0.0.0/8' }, store);
    await send(port, '/a', { headers: { 'X-Forwarded-For': '198.51.100.1, 203.0.113.7, 10.1.2.3', 'X-Forwarded-Proto': 'https' } });
    expect(store.keys.at(-1)).toBe('el:gate:203.0.113.7');
    const h = seen.at(-1)!.headers;
    expect(h['x-forwarded-for']).toBe('203.0.113.7, 10.1.2.3, 127.0.0.1');
    // A trusted proxy said the client used https.
    expect(h['x-forwarded-proto']).toBe('https');
    // Without the setting, the same header is ignored and the peer is the client.
    const plain = recording();
    const port2 = await gateway({}, plain);
    await send(port2, '/a', { headers: { 'X-Forwarded-For': '198.51.100.1, 203.0.113.7' } });
    expect(plain.keys.at(-1)).toBe('el:gate:127.0.0.1');
  });

  it('GATE_TRUSTED_PROXIES: an ip:port entry (Azure Application Gateway) keys by the address, and X-Forwarded-For carries it without the port', async () => {
    const store = recording();
    const port = await gateway({ LIMITER_POLICIES: JSON.stringify({ gate: { capacity: 1, refillPerSecond: 0.001 } }), GATE_TRUSTED_PROXIES: '127.0.0.0/8' }, store);
    expect((await send(port, '/a', { headers: { 'X-Forwarded-For': '203.0.113.7:51234' } })).status).toBe(200);
    expect(store.keys.at(-1)).toBe('el:gate:203.0.113.7');
    expect(seen.at(-1)!.headers['x-forwarded-for']).toBe('203.0.113.7, 127.0.0.1');
    // The same client on another connection (another source port) is the same bucket.
    expect((await send(port, '/a', { headers: { 'X-Forwarded-For': '203.0.113.7:51235' } })).status).toBe(429);
    // A different client behind the same balancer is not.
    expect((await send(port, '/a', { headers: { 'X-Forwarded-For': '[2001:db8::1]:443' } })).status).toBe(200);
    expect(store.keys.at(-1)).toBe('el:gate:2001:db8::/64');
  });

  it('IPv6 clients share a bucket per /64 by default; GATE_IPV6_SUBNET changes it', async () => {
    const policies = JSON.stringify({ gate: { capacity: 1, refillPerSecond: 0.001 } });
    const port = await gateway({ LIMITER_POLICIES: policies, GATE_TRUSTED_PROXIES: '127.0.0.1' });
    const from = (ip: string) => send(port, '/v6', { headers: { 'X-Forwarded-For': ip } });
    expect((await from('2001:db8:1:2::a')).status).toBe(200);
    expect((await from('2001:DB8:1:2:ffff:ffff:ffff:ffff')).status).toBe(429);
    expect((await from('2001:db8:1:3::a')).status).toBe(200);
    const per = await gateway({ LIMITER_POLICIES: policies, GATE_TRUSTED_PROXIES: '127.0.0.1', GATE_IPV6_SUBNET: '128' });
    expect((await send(per, '/v6', { headers: { 'X-Forwarded-For': '2001:db8:9::a' } })).status).toBe(200);
    expect((await send(per, '/v6', { headers: { 'X-Forwarded-For': '2001:db8:9::b' } })).status).toBe(200);
  });

  it('GATE_KEY=header:<name> keys by the SHA-256 of the value; the raw secret never reaches the store', async () => {
    const store = recording();
    const port = await gateway({ GATE_KEY: 'header:x-api-key' }, store);
    await send(port, '/k', { headers: { 'X-Api-Key': 'sk_live_secret_123' } });
    const digest = createHash('sha256').update('sk_live_secret_123').digest('base64url');
    expect(store.keys).toEqual([`el:gate:${digest}`]);
    expect(store.keys.join()).not.toContain('sk_live');
    expect((await send(port, '/k')).status).toBe(400);
  });
});
