// The Node entry end to end on the real Redis store: two server processes share one Redis and obey
// one combined limit; the client SDK against the real server; clean shutdown on SIGTERM.
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { createServer, type Server } from 'node:http';
import { AcquireTimeoutError } from '../../src/index.js';
import { limitedFetch, PermitClient, PermitError } from '../../src/client/permit-client.js';
import { startNodeServer, type NodeServer } from '../support/node-server.js';
import { combinedRun } from '../support/combined.js';
import { openApiJson } from '../../src/http/openapi.js';

const TOKEN = 'node-token';
const POLICIES = { shared: { capacity: 10, refillPerSecond: 20 }, paced: { capacity: 1, refillPerSecond: 10 }, slow: { capacity: 1, refillPerSecond: 0.1 } };

let a: NodeServer;
let b: NodeServer;
beforeAll(async () => {
  const env = { REDIS_URL: inject('redisUrl'), LIMITER_POLICIES: JSON.stringify(POLICIES), PERMIT_TOKENS: TOKEN };
  [a, b] = await Promise.all([startNodeServer(env), startNodeServer(env)]);
});
afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
});

describe('Node server on Redis', () => {
  it('two instances sharing one Redis obey one combined limit', async () => {
    const clients = [new PermitClient({ url: a.url, token: TOKEN }), new PermitClient({ url: b.url, token: TOKEN })];
    const { admitted, idealMin, idealMax } = await combinedRun(clients, { policy: 'shared', key: `combined-${Date.now()}`, callers: 32, durationMs: 2000, ...POLICIES.shared });
    console.log(`[node x2 on redis] admitted=${admitted} ideal∈[${idealMin.toFixed(2)}, ${idealMax.toFixed(2)}]`);
    expect(admitted).toBeLessThanOrEqual(Math.floor(idealMax));
    expect(admitted).toBeGreaterThanOrEqual(Math.floor(idealMin - 1 - idealMin * 0.005));
  });

  it('/healthz reports the redis store', async () => {
    expect(await (await fetch(`${a.url}/healthz`)).json()).toEqual({ ok: true, store: 'redis', pendingStoreCalls: 0, maxPendingStoreCalls: 1024, circuit: 'closed', leases: { keys: 0, tokens: 0 }, localKeys: 0 });
  });

  it('serves the OpenAPI document at GET /v1/openapi.json without a token', async () => {
    const res = await fetch(`${a.url}/v1/openapi.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(await res.text()).toBe(openApiJson);
  });
});

describe('PermitClient against the real server', () => {
  const client = () => new PermitClient({ url: a.url, token: TOKEN });

  it('take and peek return the Decision shape; 429 resolves with allowed: false', async () => {
    const key = `sdk-${Date.now()}`;
    const d = await client().take('paced', key);
    expect(d).toMatchObject({ allowed: true, policy: 'paced', key, limit: 1, remaining: 0, retryAfterMs: 0, waitMs: 0 });
    const denied = await client().take('paced', key);
    expect(denied.allowed).toBe(false);
    expect(denied.retryAfterMs).toBeGreaterThan(0);
    expect((await client().peek('paced', key)).remaining).toBe(0);
    // reset refills the bucket; one of an unknown policy is a PermitError carrying the problem.
    await expect(client().reset('paced', key)).resolves.toBeUndefined();
    expect((await client().peek('paced', key)).remaining).toBe(1);
    await expect(client().reset('nope', key)).rejects.toMatchObject({ status: 404, problem: { type: 'urn:edge-limiter:problem:unknown-policy' } });
  });

  it('acquire reserves in one request, then sleeps: callers start 100 ms apart', async () => {
    let requests = 0;
    const counting: typeof fetch = (input, init) => {
      requests++;
      return fetch(input, init);
    };
    const c = new PermitClient({ url: b.url, token: TOKEN, fetch: counting });
    const key = `acq-${Date.now()}`;
    const t0 = performance.now();
    const starts = await Promise.all(Array.from({ length: 5 }, () => c.acquire('paced', key, { timeoutMs: 2000 }).then(() => performance.now() - t0)));
    starts.sort((x, y) => x - y);
    expect(requests).toBe(5);
    for (let i = 1; i < starts.length; i++) {
      expect(starts[i]! - starts[i - 1]!).toBeGreaterThan(80);
      expect(starts[i]! - starts[i - 1]!).toBeLessThan(130);
    }
  });

  it('acquire rejects with AcquireTimeoutError, consuming nothing; bad tokens give PermitError', async () => {
    const key = `slow-${Date.now()}`;
    await client().take('slow', key);
    const err = await client().acquire('slow', key, { timeoutMs: 500 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AcquireTimeoutError);
    expect((await client().peek('slow', key)).resetAfterMs).toBeLessThanOrEqual(10_000);
    const bad = await new PermitClient({ url: a.url, token: 'nope' }).take('slow', key).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(PermitError);
    expect((bad as PermitError).status).toBe(401);
    expect((bad as PermitError).problem?.type).toBe('urn:edge-limiter:problem:unauthorized');
  });

  it('limitedFetch spaces upstream calls through the shared bucket', async () => {
    const calls: number[] = [];
    const upstream: Server = createServer((_, res) => {
      calls.push(performance.now());
      res.end('ok');
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', () => r()));
    const url = `http://127.0.0.1:${(upstream.address() as { port: number }).port}/v1/chat`;
    try {
      const f = limitedFetch(fetch, { client: client(), policy: 'paced', key: `ai-${Date.now()}`, timeoutMs: 2000 });
      const bodies = await Promise.all(Array.from({ length: 4 }, () => f(url).then((r) => r.text())));
      expect(bodies).toEqual(['ok', 'ok', 'ok', 'ok']);
      calls.sort((x, y) => x - y);
      for (let i = 1; i < calls.length; i++) expect(calls[i]! - calls[i - 1]!).toBeGreaterThan(80);
    } finally {
      await new Promise<void>((r) => upstream.close(() => r()));
    }
  });
});

describe('shutdown', () => {
  it('exits 0 on SIGTERM', async () => {
    const s = await startNodeServer({ LIMITER_STORE: 'memory', PERMIT_TOKENS: TOKEN });
    expect((await fetch(`${s.url}/healthz`)).status).toBe(200);
    expect(await s.stop()).toBe(0);
    expect(s.output()).toContain('shutting down');
  });

  it('refuses to start on invalid configuration, naming the field', async () => {
    await expect(startNodeServer({ LIMITER_POLICIES: '{"x":{"capacity":0,"refillPerSecond":1}}' })).rejects.toThrow(/LIMITER_POLICIES\.x\.capacity/);
    await expect(startNodeServer({ LIMITER_POLICIES: '{not json' })).rejects.toThrow(/LIMITER_POLICIES is not valid JSON/);
    await expect(startNodeServer({ LIMITER_STORE: 'redis' })).rejects.toThrow(/REDIS_URL is required/);
  });
});
