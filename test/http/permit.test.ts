// The permit endpoint's exact contract, driven through app.request (no network), memory store.
import { describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import { createLimiter, memoryStore, type Store } from '../../src/index.js';
import { permitApp } from '../../src/http/permit-app.js';
import { checked } from '../support/openapi-contract.js';

const TOKEN = 'tok-0123456789abcdef';
const policies = { api: { capacity: 3, refillPerSecond: 1 }, open: { capacity: 1, refillPerSecond: 1, onStoreError: 'allow' as const } };

function setup(opts: { store?: Store; tokens?: string[] } = {}) {
  const limiter = createLimiter({ store: opts.store ?? memoryStore(), policies, circuitBreaker: false, timeoutMs: 100 });
  const logs: unknown[] = [];
  const app = checked(permitApp({ limiter, tokens: opts.tokens ?? [TOKEN], log: (level, line) => logs.push({ level, ...line }) }));
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    app.request('/v1/permits', {
      method: 'POST',
      headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
  return { app, limiter, post, logs };
}

async function expectProblem(res: Response, status: number, type: string) {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toBe('application/problem+json');
  const body = (await res.json()) as Record<string, unknown>;
  expect(body).toMatchObject({ type: `urn:edge-limiter:problem:${type}`, status });
  expect(typeof body.title).toBe('string');
  expect(typeof body.detail).toBe('string');
  return body;
}

describe('POST /v1/permits', () => {
  it('200 with the decision body and headers, then 429 with Retry-After, byte for byte', async () => {
    const { post } = setup();
    const t0 = performance.now();
    const first = await post({ policy: 'api', key: 'user-1' });
    expect(first.status).toBe(200);
    expect(first.headers.get('content-type')).toBe('application/json');
    const body = await first.json();
    expect(Object.keys(body)).toEqual(['allowed', 'policy', 'key', 'limit', 'remaining', 'retryAfterMs', 'resetAfterMs', 'waitMs']);
    expect(body).toMatchObject({ allowed: true, policy: 'api', key: 'user-1', limit: 3, remaining: 2, retryAfterMs: 0, waitMs: 0 });
    expect(first.headers.get('ratelimit-policy')).toBe('"api";q=3;w=3');
    expect(first.headers.get('ratelimit')).toBe('"api";r=2;t=1');
    expect(first.headers.get('x-ratelimit-limit')).toBe('3');
    expect(first.headers.get('x-ratelimit-remaining')).toBe('2');
    expect(first.headers.get('x-ratelimit-reset')).toBe('1');
    expect(first.headers.get('retry-after')).toBeNull();
    await post({ policy: 'api', key: 'user-1', cost: 2 });
    const denied = await post({ policy: 'api', key: 'user-1' });
    expect(denied.status).toBe(429);
    expect(denied.headers.get('content-type')).toBe('application/json');
    const d = await denied.json();
    expect(d).toMatchObject({ allowed: false, remaining: 0, waitMs: 0 });
    expect(d.retryAfterMs).toBeGreaterThanOrEqual(1000 - (performance.now() - t0) - 1);
    expect(denied.headers.get('retry-after')).toBe('1');
    expect(denied.headers.get('ratelimit')).toBe('"api";r=0;t=3');
  });

  it('reserves with maxWaitMs: 200 with waitMs > 0', async () => {
    const { post } = setup();
    const t0 = performance.now();
    await post({ policy: 'api', key: 'k', cost: 3 });
    const res = await post({ policy: 'api', key: 'k', maxWaitMs: 2000 });
    expect(res.status).toBe(200);
    const b = await res.json();
    expect(b.waitMs).toBeGreaterThanOrEqual(1000 - (performance.now() - t0) - 1);
    expect(b.waitMs).toBeLessThanOrEqual(1000);
  });

  const bad400: [string, unknown][] = [
    ['not an object', [1, 2]],
    ['a JSON string', '"api"'],
    ['null', 'null'],
    ['missing policy', { key: 'k' }],
    ['policy not a string', { policy: 1, key: 'k' }],
    ['missing key', { policy: 'api' }],
    ['empty key', { policy: 'api', key: '' }],
    ['key of 513 bytes', { policy: 'api', key: 'x'.repeat(513) }],
    ['key object (operator injection)', { policy: 'api', key: { $gt: '' } }],
    ['key number', { policy: 'api', key: 5 }],
    ['cost 0', { policy: 'api', key: 'k', cost: 0 }],
    ['cost above capacity', { policy: 'api', key: 'k', cost: 4 }],
    ['cost fractional', { policy: 'api', key: 'k', cost: 1.5 }],
    ['cost negative', { policy: 'api', key: 'k', cost: -1 }],
    ['cost string', { policy: 'api', key: 'k', cost: '1' }],
    ['cost 1e309', '{"policy":"api","key":"k","cost":1e309}'],
    ['maxWaitMs too large', { policy: 'api', key: 'k', maxWaitMs: 300_001 }],
    ['maxWaitMs negative', { policy: 'api', key: 'k', maxWaitMs: -1 }],
    ['unknown field', { policy: 'api', key: 'k', extra: true }],
  ];
  for (const [name, body] of bad400) {
    it(`400 invalid-request: ${name}, and the bucket is untouched`, async () => {
      const { post, limiter } = setup();
      await expectProblem(await post(body), 400, 'invalid-request');
      expect((await limiter.peek('api', 'k')).remaining).toBe(3);
    });
  }

  it('400 invalid-json for malformed JSON', async () => {
    const { post } = setup();
    await expectProblem(await post('{"policy":'), 400, 'invalid-json');
    await expectProblem(await post(''), 400, 'invalid-json');
  });

  it('404 unknown-policy', async () => {
    const { post } = setup();
    const b = await expectProblem(await post({ policy: 'nope', key: 'k' }), 404, 'unknown-policy');
    expect(b.field).toBe('policy');
  });

  it('413 for a body over 8 KB, with or without Content-Length', async () => {
    const { app, post } = setup();
    await expectProblem(await post({ policy: 'api', key: 'k', pad: 'x'.repeat(9000) }), 413, 'payload-too-large');
    const stream = new ReadableStream({
      start(c) {
        for (let i = 0; i < 20; i++) c.enqueue(new TextEncoder().encode('x'.repeat(1024)));
        c.close();
      },
    });
    const res = await app.request('/v1/permits', {
      method: 'POST',
      headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
      body: stream,
      duplex: 'half',
    } as RequestInit);
    await expectProblem(res, 413, 'payload-too-large');
  });

  it('415 when the body is not JSON', async () => {
    const { post, app } = setup();
    await expectProblem(await post('policy=api', { 'Content-Type': 'application/x-www-form-urlencoded' }), 415, 'unsupported-media-type');
    const res = await app.request('/v1/permits', { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}` }, body: '{}' });
    await expectProblem(res, 415, 'unsupported-media-type');
    expect((await post('{"policy":"api","key":"k"}', { 'Content-Type': 'application/json; charset=utf-8' })).status).toBe(200);
  });

  it('405 for other methods', async () => {
    const { app } = setup();
    const res = await app.request('/v1/permits', { method: 'PUT', headers: { Authorization: `Bearer ${TOKEN}` } });
    await expectProblem(res, 405, 'method-not-allowed');
  });

  it('503 with Retry-After on a store error under onStoreError deny; 200 with reason under allow', async () => {
    const failing: Store = { name: 'down', step: () => Promise.reject(new Error('ECONNREFUSED')), reset: () => Promise.reject(new Error('x')), ping: () => Promise.reject(new Error('x')) };
    const { post } = setup({ store: failing });
    const res = await post({ policy: 'api', key: 'k' });
    await expectProblem(res, 503, 'store-unavailable');
    expect(res.headers.get('retry-after')).toBe('1');
    const open = await post({ policy: 'open', key: 'k' });
    expect(open.status).toBe(200);
    expect(await open.json()).toMatchObject({ allowed: true, reason: 'store_error' });
    expect(open.headers.get('x-ratelimit-reason')).toBe('store_error');
  });
});

describe('authentication', () => {
  it('401 for no token, a wrong token, another length, a non-Bearer scheme, or a token in the query string', async () => {
    const { app } = setup();
    const attempts: [string, Record<string, string>][] = [
      ['/v1/permits', {}],
      ['/v1/permits', { Authorization: 'Bearer wrong-token-0123456' }],
      ['/v1/permits', { Authorization: 'Bearer x' }],
      ['/v1/permits', { Authorization: `Bearer ${TOKEN}x` }],
      ['/v1/permits', { Authorization: `Basic ${TOKEN}` }],
      ['/v1/permits', { Authorization: TOKEN }],
      [`/v1/permits?token=${TOKEN}`, {}],
      [`/v1/permits?access_token=${TOKEN}`, {}],
    ];
    for (const [path, headers] of attempts) {
      const res = await app.request(path, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: '{"policy":"api","key":"k"}' });
      await expectProblem(res, 401, 'unauthorized');
      expect(res.headers.get('www-authenticate')).toBe('Bearer');
    }
  });

  it('accepts any configured token', async () => {
    const { app } = setup({ tokens: ['a-token', TOKEN] });
    for (const t of ['a-token', TOKEN]) {
      const res = await app.request('/v1/permits', { method: 'POST', headers: { Authorization: `Bearer ${t}`, 'Content-Type': 'application/json' }, body: '{"policy":"api","key":"k"}' });
      expect(res.status).toBe(200);
    }
  });

  it('with no tokens configured refuses everything and says why once in the log', async () => {
    const { app, logs } = setup({ tokens: [] });
    for (let i = 0; i < 3; i++) await expectProblem(await app.request('/v1/permits', { method: 'POST', headers: { Authorization: 'Bearer ' } }), 401, 'unauthorized');
    expect(logs).toEqual([{ level: 'warn', msg: 'permit API refuses every request: no PERMIT_TOKENS are configured' }]);
  });
});

describe('buckets and health', () => {
  it('GET consumes nothing; DELETE resets with 204', async () => {
    const { app, post } = setup();
    await post({ policy: 'api', key: 'user/with spaces', cost: 2 });
    const auth = { Authorization: `Bearer ${TOKEN}` };
    const path = `/v1/buckets/api/${encodeURIComponent('user/with spaces')}`;
    for (let i = 0; i < 3; i++) {
      const res = await app.request(path, { headers: auth });
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ allowed: true, policy: 'api', key: 'user/with spaces', remaining: 1 });
      expect(res.headers.get('ratelimit')).toBe('"api";r=1;t=2');
    }
    const del = await app.request(path, { method: 'DELETE', headers: auth });
    expect(del.status).toBe(204);
    expect(await (await app.request(path, { headers: auth })).json()).toMatchObject({ remaining: 3 });
    await expectProblem(await app.request('/v1/buckets/nope/k', { headers: auth }), 404, 'unknown-policy');
    await expectProblem(await app.request('/v1/buckets/api/k'), 401, 'unauthorized');
  });

  /** Charges `key` through POST, then reads and resets it through /v1/buckets, as a client would address it. */
  async function roundTrip(app: ReturnType<typeof setup>['app'], post: ReturnType<typeof setup>['post'], key: string) {
    const auth = { Authorization: `Bearer ${TOKEN}` };
    const charged = await post({ policy: 'api', key, cost: 2 });
    expect(charged.status, JSON.stringify(key)).toBe(200);
    const path = `/v1/buckets/api/${encodeURIComponent(key)}`;
    const read = await app.request(path, { headers: auth });
    expect(read.status, JSON.stringify(key)).toBe(200);
    expect(await read.json(), JSON.stringify(key)).toMatchObject({ key, remaining: 1 });
    const reset = await app.request(path, { method: 'DELETE', headers: auth });
    expect(reset.status, JSON.stringify(key)).toBe(204);
    expect(await (await app.request(path, { headers: auth })).json(), JSON.stringify(key)).toMatchObject({ key, remaining: 3 });
  }

  it('a key with a line terminator (\\n, \\r, U+2028, U+2029) can be charged, read and reset', async () => {
    const { app, post } = setup();
    for (const key of ['a\nb', '\r', 'x\r\ny', 'line\u2028sep', '\u2029', '\n\n', '...', '%2e', 'a/../b', '100%', '?#', ' ']) await roundTrip(app, post, key);
  });

  it('every key POST accepts can be read and reset (property)', async () => {
    const { app, post } = setup();
    const special = fc.constantFrom('.', '/', '%', '2', 'e', 'E', '\n', '\r', '\u2028', '\u2029', '\u0085', '?', '#', ' ', '\\', '\t', '\u0000', '+', '~', 'é', '😀');
    const keys = fc.oneof(fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }), fc.string({ unit: special, minLength: 1, maxLength: 8 }));
    await fc.assert(
      fc.asyncProperty(keys, async (key) => {
        if (key === '.' || key === '..') {
          expect((await post({ policy: 'api', key })).status).toBe(400);
          return;
        }
        await roundTrip(app, post, key);
      }),
      { numRuns: 400 },
    );
  });

  it('"." and ".." (which no URL path can name) are refused up front with 400, and nothing is charged', async () => {
    const { post, limiter } = setup();
    for (const key of ['.', '..']) {
      const body = await expectProblem(await post({ policy: 'api', key }), 400, 'invalid-request');
      expect(body.field).toBe('key');
      expect((await limiter.peek('api', key)).remaining).toBe(3);
    }
  });

  it('/healthz needs no token and answers 503 when the store is unreachable', async () => {
    expect(await (await setup().app.request('/healthz')).json()).toEqual({ ok: true, store: 'memory', pendingStoreCalls: 0, maxPendingStoreCalls: 1024, circuit: 'closed', leases: { keys: 0, tokens: 0 }, localKeys: 0 });
    const hanging: Store = { name: 'redis', step: () => new Promise(() => {}), reset: async () => {}, ping: () => new Promise(() => {}) };
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const pending = setup({ store: hanging }).app.request('/healthz');
      await vi.advanceTimersByTimeAsync(1000);
      const res = await pending;
      expect(res.status).toBe(503);
      expect(await res.json()).toMatchObject({ ok: false, store: 'redis' });
    } finally {
      vi.useRealTimers();
    }
  });

  it('unknown routes are 404 problem+json', async () => {
    await expectProblem(await setup().app.request('/nope'), 404, 'not-found');
  });
});
