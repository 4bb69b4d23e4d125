// The runtime-limits routes of the permit API (src/http/limits-routes.ts) and a block as the HTTP layers
// answer it: each change is one JSON log line (the deployed app's, from the limiter's onAudit) naming the
// action, the caller's token, the policy, the key and the numbers before and after; bad input is a 400 problem naming the field and changes nothing; a
// blocked key gets 429 with Retry-After and X-RateLimit-Reason: blocked from the permit API and the
// middleware. Every response is held to the OpenAPI document (checked).
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { createLimiter, memoryStore } from '../../src/index.js';
import { rateLimit } from '../../src/http/middleware.js';
import { permitApp } from '../../src/http/permit-app.js';
import { checked } from '../support/openapi-contract.js';
import { auditLogger } from '../../functions/app/app.js';

const TOKEN = 'limits-token';
const auth = { Authorization: `Bearer ${TOKEN}` };
const json = (method: string, body: unknown): RequestInit => ({ method, headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });

function setup() {
  const logs: Record<string, unknown>[] = [];
  const log = (level: string, line: Record<string, unknown>) => logs.push({ level, ...line });
  // The deployed app's audit lines: the limiter's onAudit, with the token's name as the actor.
  const limiter = createLimiter({
    onAudit: auditLogger(log),
    store: memoryStore(),
    policies: {
      free: { capacity: 2, refillPerSecond: 1 / 3600 },
      multi: { limits: { second: { capacity: 5, refillPerSecond: 5 }, day: { capacity: 100, refill: '100/day' } } },
    },
  });
  const app = checked(permitApp({ limiter, tokens: [TOKEN], log }));
  return { limiter, app, logs };
}

describe('PUT/GET/DELETE /v1/limits/{policy}/{key}', () => {
  it('sets a key\'s numbers, obeyed by the next decision (body and headers), and logs one line with the numbers before and after', async () => {
    const { app, logs } = setup();
    await app.request('/v1/permits', json('POST', { policy: 'free', key: 'cust 1' }));
    const res = await app.request('/v1/limits/free/cust%201', json('PUT', { capacity: 1000, refill: '1000/hour' }));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      policy: 'free',
      key: 'cust 1',
      limits: [{ name: 'free', capacity: 1000, refillPerSecond: 1000 / 3600 }],
      source: 'key',
      previous: { limits: [{ name: 'free', capacity: 2, refillPerSecond: 1 / 3600 }], source: 'policy' },
    });
    const audit = logs.filter((l) => l.msg === 'audit');
    expect(audit).toEqual([
      {
        level: 'info',
        msg: 'audit',
        action: 'limits',
        token: 'token-1', // a plain token's name: its place in the list
        policy: 'free',
        key: 'cust 1',
        before: { limits: [{ name: 'free', capacity: 2, refillPerSecond: 1 / 3600 }], source: 'policy' },
        after: { limits: [{ name: 'free', capacity: 1000, refillPerSecond: 1000 / 3600 }], source: 'key' },
        at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      },
    ]);
    const take = await app.request('/v1/permits', json('POST', { policy: 'free', key: 'cust 1' }));
    expect(take.status).toBe(200);
    expect(take.headers.get('ratelimit-policy')).toBe('"free";q=1000;w=3600');
    expect(await take.json()).toMatchObject({ limit: 1000, remaining: 998, limitsInForce: [{ capacity: 1000 }] });
    expect(await (await app.request('/v1/limits/free/cust%201', { headers: auth })).json()).toMatchObject({ source: 'key', limits: [{ capacity: 1000 }] });
    const cleared = await app.request('/v1/limits/free/cust%201', { method: 'DELETE', headers: auth });
    expect(await cleared.json()).toMatchObject({ source: 'policy', previous: { source: 'key' } });
    expect(logs.filter((l) => l.msg === 'audit')).toHaveLength(2);
  });

  it('refuses a bad body with a 400 naming the field; nothing is changed or logged', async () => {
    const { app, logs, limiter } = setup();
    const field = async (path: string, body: unknown) => {
      const res = await app.request(path, json('PUT', body));
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.headers.get('content-type')).toBe('application/problem+json');
      return ((await res.json()) as { field: string }).field;
    };
    expect(await field('/v1/limits/free/k', { capacity: 0, refillPerSecond: 1 })).toBe('capacity');
    expect(await field('/v1/limits/free/k', { capacity: 5 })).toBe('refillPerSecond');
    expect(await field('/v1/limits/free/k', { capacity: 5, refillPerSecond: 1, burst: 3 })).toBe('burst');
    expect(await field('/v1/limits/free/k', { capacity: 5, refillPerSecond: 1, expiresInMs: 'soon' })).toBe('expiresInMs');
    expect(await field('/v1/limits/multi/k', { limits: { week: { capacity: 5, refillPerSecond: 1 } } })).toBe('limits.week');
    expect(await field('/v1/limits/multi/k', { limits: { day: { capacity: 5, refill: 'lots' } } })).toBe('limits.day.refill');
    expect(await field('/v1/limits/multi', { capacity: 5, refillPerSecond: 1 })).toBe('limits');
    expect(await field('/v1/blocks/free/k', { forMs: 0 })).toBe('forMs');
    expect(await field('/v1/blocks/free/k', [])).toBe('');
    expect(logs.filter((l) => l.msg === 'audit')).toEqual([]);
    expect(await limiter.getLimits('free', 'k')).toEqual({ policy: 'free', key: 'k', source: 'policy', limits: [{ name: 'free', capacity: 2, refillPerSecond: 1 / 3600 }] });
    expect((await app.request('/v1/limits/free/k', { method: 'POST', headers: auth })).status).toBe(405);
  });
});

describe('a policy-wide change: PUT/GET/DELETE /v1/limits/{policy}', () => {
  it('changes every key without numbers of its own, at once on this server; a key\'s own numbers win', async () => {
    const { app, logs } = setup();
    await app.request('/v1/limits/multi/vip', json('PUT', { limits: { day: { capacity: 1000, refill: '1000/day' } } }));
    const res = await app.request('/v1/limits/multi', json('PUT', { limits: { day: { capacity: 10, refill: '10/day' } } }));
    expect(await res.json()).toMatchObject({ policy: 'multi', source: 'policy-wide', limits: [{ capacity: 5 }, { capacity: 10 }], previous: { source: 'policy' } });
    expect(logs.at(-1)).toMatchObject({ msg: 'audit', action: 'policy-limits', policy: 'multi', key: '*', after: { source: 'policy-wide' } });
    const take = await app.request('/v1/permits', json('POST', { policy: 'multi', key: 'anyone' }));
    expect(take.headers.get('ratelimit-policy')).toBe('"multi.second";q=5;w=1, "multi.day";q=10;w=86400');
    const vip = await app.request('/v1/permits', json('POST', { policy: 'multi', key: 'vip' }));
    expect(vip.headers.get('ratelimit-policy')).toBe('"multi.second";q=5;w=1, "multi.day";q=1000;w=86400');
    expect(await (await app.request('/v1/limits/multi/newcomer', { headers: auth })).json()).toMatchObject({ source: 'policy-wide' });
    await app.request('/v1/limits/multi', { method: 'DELETE', headers: auth });
    const after = await app.request('/v1/permits', json('POST', { policy: 'multi', key: 'anyone' }));
    expect(after.headers.get('ratelimit-policy')).toBe('"multi.second";q=5;w=1, "multi.day";q=100;w=86400');
    expect(await (await app.request('/v1/limits/multi', { headers: auth })).json()).toEqual({ policy: 'multi', source: 'policy', limits: expect.any(Array) });
  });
});

describe('a blocked key', () => {
  it('the permit API: PUT /v1/blocks refuses it with 429, Retry-After and X-RateLimit-Reason: blocked; DELETE lifts it', async () => {
    const { app, logs } = setup();
    const res = await app.request('/v1/blocks/free/abuser', json('PUT', { forMs: 120_000 }));
    expect(await res.json()).toMatchObject({ blockedForMs: 120_000 });
    expect(logs.at(-1)).toMatchObject({ msg: 'audit', action: 'block', policy: 'free', key: 'abuser', before: { source: 'policy' }, after: { blockedForMs: 120_000 } });
    const refused = await app.request('/v1/permits', json('POST', { policy: 'free', key: 'abuser' }));
    expect(refused.status).toBe(429);
    expect(refused.headers.get('x-ratelimit-reason')).toBe('blocked');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(119);
    expect(await refused.json()).toMatchObject({ allowed: false, reason: 'blocked', remaining: 0 });
    const peek = await app.request('/v1/buckets/free/abuser', { headers: auth });
    expect(peek.status).toBe(200);
    expect(await peek.json()).toMatchObject({ allowed: false, reason: 'blocked' });
    await app.request('/v1/blocks/free/abuser', { method: 'DELETE', headers: auth });
    expect(logs.at(-1)).toMatchObject({ action: 'unblock', before: { blockedForMs: expect.any(Number) }, after: { source: 'policy' } });
    expect((await app.request('/v1/permits', json('POST', { policy: 'free', key: 'abuser' }))).status).toBe(200);
  });

  it('the middleware (and the gateway, which gates through it): 429 problem+json with Retry-After and X-RateLimit-Reason: blocked', async () => {
    const limiter = createLimiter({ store: memoryStore(), policies: { api: { capacity: 100, refillPerSecond: 10 } } });
    const app = new Hono();
    app.use('*', rateLimit({ limiter, policy: 'api', key: (c) => c.req.header('x-api-key') }));
    app.get('/', (c) => c.text('ok'));
    await limiter.block('api', 'bad', { forMs: 30_000 });
    const res = await app.request('/', { headers: { 'x-api-key': 'bad' } });
    expect(res.status).toBe(429);
    expect(res.headers.get('x-ratelimit-reason')).toBe('blocked');
    expect(res.headers.get('retry-after')).toBe('30');
    expect(await res.json()).toMatchObject({ type: 'urn:edge-limiter:problem:rate-limited', detail: expect.stringContaining('blocked') });
    expect((await app.request('/', { headers: { 'x-api-key': 'good' } })).status).toBe(200);
  });
});

describe('a caller\'s key named "*" is a key, never the policy-wide change (issue 31 review: it was routed to the policy\'s record)', () => {
  it('PUT /v1/blocks/free/* blocks the key "*" only; PUT /v1/limits/free/* sets that key\'s numbers only; the policy-wide change is untouched', async () => {
    const { app, limiter } = setup();
    expect((await app.request('/v1/blocks/free/*', json('PUT', { forMs: 600_000 }))).status).toBe(200);
    for (let i = 0; i < 3; i++) {
      const star = await app.request('/v1/permits', json('POST', { policy: 'free', key: '*' }));
      expect(star.status).toBe(429);
      expect(star.headers.get('X-RateLimit-Reason')).toBe('blocked');
    }
    // Another key, and the policy, are not blocked or changed.
    expect((await app.request('/v1/permits', json('POST', { policy: 'free', key: 'other' }))).status).toBe(200);
    expect(await (await app.request('/v1/limits/free', { headers: auth })).json()).toMatchObject({ source: 'policy', limits: [{ capacity: 2 }] });

    // Numbers for the key "*": that key decides under them, a fresh key under the policy's.
    expect((await app.request('/v1/limits/free/*', json('PUT', { capacity: 1, refill: '1/hour' }))).status).toBe(200);
    expect(await (await app.request('/v1/limits/free/*', { headers: auth })).json()).toMatchObject({ key: '*', source: 'key', limits: [{ capacity: 1 }], blockedForMs: expect.any(Number) });
    expect(await (await app.request('/v1/limits/free', { headers: auth })).json()).toMatchObject({ source: 'policy', limits: [{ capacity: 2 }] });
    const fresh = await Promise.all([1, 2, 3].map(() => limiter.take('free', 'fresh')));
    expect(fresh.map((d) => [d.allowed, d.limit])).toEqual([[true, 2], [true, 2], [false, 2]]);

    // A policy-wide change, then the key "*" cleared and unblocked: the change stays in force.
    expect((await app.request('/v1/limits/free', json('PUT', { capacity: 5, refill: '5/hour' }))).status).toBe(200);
    expect((await app.request('/v1/limits/free/*', { method: 'DELETE', headers: auth })).status).toBe(200);
    expect((await app.request('/v1/blocks/free/*', { method: 'DELETE', headers: auth })).status).toBe(200);
    expect(await (await app.request('/v1/limits/free', { headers: auth })).json()).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 5 }] });
    expect((await limiter.take('free', 'later')).limit).toBe(5);
  });
});

describe('a change the store will refuse again is no 503: nothing to retry (review 5, L4)', () => {
  it('a store that keeps no runtime limits: 501 runtime-limits-unsupported; a memory store at maxOverrides: 507 overrides-full; neither with Retry-After', async () => {
    const policies = { free: { capacity: 2, refillPerSecond: 1 / 3600 } };
    const { override: _none, ...plain } = memoryStore();
    const bare = checked(permitApp({ limiter: createLimiter({ store: plain, policies }), tokens: [TOKEN] }));
    for (const [path, init] of [['/v1/blocks/free/k', json('PUT', { forMs: 60_000 })], ['/v1/limits/free/k', json('PUT', { capacity: 5, refill: '5/hour' })], ['/v1/limits/free', json('PUT', { capacity: 5, refill: '5/hour' })], ['/v1/limits/free/k', { headers: auth }]] as const) {
      const res = await bare.request(path, init);
      expect(res.status).toBe(501);
      expect(res.headers.get('Retry-After')).toBeNull();
      expect(await res.json()).toMatchObject({ type: 'urn:edge-limiter:problem:runtime-limits-unsupported', detail: expect.stringContaining('keeps no runtime limits') });
    }
    const full = checked(permitApp({ limiter: createLimiter({ store: memoryStore({ maxOverrides: 1 }), policies }), tokens: [TOKEN] }));
    expect((await full.request('/v1/blocks/free/a', json('PUT', { forMs: 60_000 }))).status).toBe(200);
    const res = await full.request('/v1/blocks/free/b', json('PUT', { forMs: 60_000 }));
    expect(res.status).toBe(507);
    expect(res.headers.get('Retry-After')).toBeNull();
    expect(await res.json()).toMatchObject({ type: 'urn:edge-limiter:problem:overrides-full', detail: expect.stringContaining('maxOverrides (1) reached') });
  });
});
