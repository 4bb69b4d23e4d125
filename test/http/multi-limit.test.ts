// Several limits per policy through every HTTP surface: the headers list every limit (draft-11 lists),
// a refusal names the limits that refused, POST /v1/permits takes a cost per limit, POST
// /v1/adjustments settles after the fact, and PermitClient and settle() use both. Bad input gets a 400
// naming the field, and nothing reaches the store.
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { ConfigError, createLimiter, InvalidInputError, memoryStore, settle } from '../../src/index.js';
import { rateLimit } from '../../src/hono.js';
import { permitApp } from '../../src/http/permit-app.js';
import { checked } from '../support/openapi-contract.js';
import { PermitClient } from '../../src/client/permit-client.js';
import { switchableStore } from '../support/switchable-store.js';

const TOKEN = 'tok-multi-0123456789';
const POLICIES = {
  // 10 per second and 1,000 per day.
  api: { limits: { second: { capacity: 10, refillPerSecond: 10 }, day: { capacity: 1000, refillPerSecond: 1000 / 86400 } } },
  // An LLM API: requests and tokens per minute.
  llm: { limits: { requests: { capacity: 3, refillPerSecond: 3 / 60 }, tokens: { capacity: 1000, refillPerSecond: 1000 / 60 } } },
  one: { capacity: 2, refillPerSecond: 1 },
};

/**
 * A store clock that stands still: the numbers these tests read (a refill of 1,000 tokens a minute is
 * one every 60 ms) are exact however slow the machine is. A test that needs time to pass passes its own.
 */
const STILL = () => 1_790_000_000_000;

function setup(nowMs: () => number = STILL) {
  const store = switchableStore(nowMs);
  const limiter = createLimiter({ store, policies: POLICIES, circuitBreaker: false, timeoutMs: 200 });
  const app = checked(permitApp({ limiter, tokens: [TOKEN], log: () => {} }));
  const send = (path: string, body: unknown) =>
    app.request(path, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const client = new PermitClient({ url: 'http://permits.test', token: TOKEN, fetch: (input, init) => app.request(String(input), init as RequestInit) as Promise<Response> });
  return { store, limiter, app, send, client };
}

describe('several limits over HTTP', () => {
  it('the middleware sends every limit in RateLimit-Policy and RateLimit, and a refusal names the limit that refused', async () => {
    const { limiter } = setup();
    const app = new Hono().use(rateLimit({ limiter, policy: 'llm', key: () => 'org-1', cost: () => ({ requests: 1, tokens: 400 }) })).get('/', (c) => c.text('ok'));
    const first = await app.request('/');
    expect(first.status).toBe(200);
    expect(first.headers.get('RateLimit-Policy')).toBe('"llm.requests";q=3;w=60, "llm.tokens";q=1000;w=60');
    expect(first.headers.get('RateLimit')).toBe('"llm.requests";r=2;t=20, "llm.tokens";r=600;t=24');
    // The legacy trio carries the most constraining limit: requests, with 2 left of 3.
    expect([first.headers.get('X-RateLimit-Limit'), first.headers.get('X-RateLimit-Remaining')]).toEqual(['3', '2']);
    expect((await app.request('/')).status).toBe(200);
    // 200 tokens are left: a third call of 400 is refused by tokens, not by requests (1 left).
    const refused = await app.request('/');
    expect(refused.status).toBe(429);
    expect(refused.headers.get('content-type')).toBe('application/problem+json');
    const body = (await refused.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ type: 'urn:edge-limiter:problem:rate-limited', policy: 'llm', refusedBy: ['tokens'], limit: 1000, remaining: 200 });
    expect(String(body.detail)).toContain('(limit tokens)');
    // 200 tokens at 1000 per 60 s: 12 s until 400 exist.
    expect(refused.headers.get('Retry-After')).toBe('12');
    expect(refused.headers.get('RateLimit')).toBe('"llm.requests";r=1;t=40, "llm.tokens";r=200;t=48');
  });

  it('a policy of one limit keeps its headers exactly as before', async () => {
    const { limiter } = setup();
    const app = new Hono().use(rateLimit({ limiter, policy: 'one', key: () => 'k' })).get('/', (c) => c.text('ok'));
    const res = await app.request('/');
    expect(res.headers.get('RateLimit-Policy')).toBe('"one";q=2;w=2');
    expect(res.headers.get('RateLimit')).toBe('"one";r=1;t=1');
  });

  it('POST /v1/permits takes a cost per limit; the body carries each limit, and a 429 the limits that refused', async () => {
    const { send } = setup();
    const ok = await send('/v1/permits', { policy: 'api', key: 'k', cost: { second: 10, day: 10 } });
    expect(ok.status).toBe(200);
    const body = (await ok.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ allowed: true, policy: 'api', key: 'k', limit: 10, remaining: 0 });
    expect(body.limits).toEqual([
      { name: 'second', limit: 10, remaining: 0, resetAfterMs: 1000, retryAfterMs: 0, waitMs: 0 },
      { name: 'day', limit: 1000, remaining: 990, resetAfterMs: 864_000, retryAfterMs: 0, waitMs: 0 },
    ]);
    const refused = await send('/v1/permits', { policy: 'api', key: 'k', cost: 1 });
    expect(refused.status).toBe(429);
    const refusal = (await refused.json()) as { allowed: boolean; refusedBy: string[]; retryAfterMs: number };
    expect(refusal).toMatchObject({ allowed: false, refusedBy: ['second'] });
    // A token of `second` every 100 ms.
    expect(refusal.retryAfterMs).toBe(100);
  });

  it('POST /v1/adjustments refunds and charges in one store call, with the same auth and errors as /v1/permits', async () => {
    const { send, app, store } = setup();
    await send('/v1/permits', { policy: 'llm', key: 'org', cost: { requests: 1, tokens: 900 } });
    // The call used 150 tokens: 750 go back.
    const before = store.calls;
    const refund = await send('/v1/adjustments', { policy: 'llm', key: 'org', cost: { tokens: -750 } });
    expect(store.calls - before).toBe(1);
    expect(refund.status).toBe(200);
    expect(((await refund.json()) as { limits: { remaining: number }[] }).limits.map((l) => l.remaining)).toEqual([2, 850]);
    // It used 1,500: a debt of 650 beyond the 850 left.
    const charge = await send('/v1/adjustments', { policy: 'llm', key: 'org', cost: { tokens: 1500 } });
    expect(charge.status).toBe(200);
    expect(await charge.json()).toMatchObject({ allowed: false, remaining: 0 });
    // The same auth, methods and problem+json errors.
    expect((await app.request('/v1/adjustments', { method: 'POST', body: '{}' })).status).toBe(401);
    expect((await app.request('/v1/adjustments', { method: 'GET', headers: { Authorization: `Bearer ${TOKEN}` } })).status).toBe(405);
    store.down = true;
    const down = await send('/v1/adjustments', { policy: 'llm', key: 'org', cost: -1 });
    expect(down.status).toBe(503);
    expect(await down.json()).toMatchObject({ type: 'urn:edge-limiter:problem:store-unavailable' });
  });

  it('bad costs get a 400 naming the field, and nothing reaches the store', async () => {
    const { send, store } = setup();
    const cases: [string, unknown, string][] = [
      ['/v1/permits', { tokens: 1, nope: 1 }, 'cost.nope'],
      ['/v1/permits', { tokens: -1 }, 'cost.tokens'],
      ['/v1/permits', { tokens: 1001 }, 'cost.tokens'],
      ['/v1/permits', 4, 'cost'],
      ['/v1/permits', { requests: 0, tokens: 0 }, 'cost'],
      ['/v1/permits', 'five', 'cost'],
      ['/v1/adjustments', 0, 'cost'],
      ['/v1/adjustments', { tokens: 0 }, 'cost'],
      ['/v1/adjustments', { tokens: 1.5 }, 'cost.tokens'],
      ['/v1/adjustments', { tokens: 2e9 }, 'cost.tokens'],
      ['/v1/adjustments', undefined, 'cost'],
    ];
    for (const [path, cost, field] of cases) {
      const res = await send(path, { policy: 'llm', key: 'k', ...(cost === undefined ? {} : { cost }) });
      expect(res.status, JSON.stringify(cost)).toBe(400);
      expect(res.headers.get('content-type')).toBe('application/problem+json');
      expect(await res.json(), JSON.stringify(cost)).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request', field });
    }
    expect(store.calls).toBe(0);
  });

  it('the library refuses the same costs with an InvalidInputError naming the field, before the store', async () => {
    const { limiter, store } = setup();
    await expect(limiter.take('llm', 'k', { cost: { tokens: 1, bogus: 1 } })).rejects.toMatchObject({ field: 'cost.bogus' });
    await expect(limiter.take('llm', 'k', { cost: { tokens: -5 } })).rejects.toBeInstanceOf(InvalidInputError);
    await expect(limiter.take('llm', 'k', { cost: 4 })).rejects.toThrow(/invalid cost: must be at most the smallest capacity of the policy's limits, 3, got 4/);
    await expect(limiter.adjust('llm', 'k', 0)).rejects.toMatchObject({ field: 'cost' });
    await expect(limiter.acquire('llm', 'k', { cost: { requests: 4 } })).rejects.toMatchObject({ field: 'cost.requests' });
    expect(store.calls).toBe(0);
  });

  it('PermitClient takes per-limit costs and adjusts; settle() reserves an estimate and settles by the actual cost', async () => {
    const { client, limiter } = setup();
    expect(await client.take('llm', 'c', { cost: { requests: 1, tokens: 100 } })).toMatchObject({ allowed: true });
    expect((await client.adjust('llm', 'c', { tokens: -50 })).limits?.map((l) => l.remaining)).toEqual([2, 950]);
    // An LLM call estimated at 500 tokens that used 620 (usage.total_tokens): 120 more are charged.
    const answer = await settle(client, { policy: 'llm', key: 'c', estimate: { requests: 1, tokens: 500 }, actual: (r: { usage: { total_tokens: number } }) => ({ requests: 1, tokens: r.usage.total_tokens }) }, async () => ({
      usage: { total_tokens: 620 },
    }));
    expect(answer.usage.total_tokens).toBe(620);
    expect((await limiter.peek('llm', 'c')).limits?.map((l) => l.remaining)).toEqual([1, 330]);
    // A call that fails gives its whole estimate back (the library's limiter settles the same way).
    await expect(
      settle(limiter, { policy: 'llm', key: 'c', estimate: { requests: 1, tokens: 300 }, actual: () => ({ requests: 1, tokens: 300 }) }, async () => {
        throw new Error('upstream 500');
      }),
    ).rejects.toThrow('upstream 500');
    expect((await limiter.peek('llm', 'c')).limits?.map((l) => l.remaining)).toEqual([1, 330]);
    // An actual cost that cannot be settled (a number for an object estimate, a fraction) gives the
    // estimate back too, and the error is the caller's.
    await expect(settle(limiter, { policy: 'llm', key: 'c', estimate: { tokens: 100 }, actual: () => 100 }, async () => 'done')).rejects.toThrow(TypeError);
    await expect(settle(limiter, { policy: 'llm', key: 'c', estimate: { tokens: 100 }, actual: () => ({ tokens: 1.5 }) }, async () => 'done')).rejects.toBeInstanceOf(InvalidInputError);
    expect((await limiter.peek('llm', 'c')).limits?.map((l) => l.remaining)).toEqual([1, 330]);
  });

  it('configuration: limits are validated by name, and leases on several limits are refused', () => {
    const make = (policy: unknown) => () => createLimiter({ store: memoryStore(), policies: { api: policy as never } });
    expect(make({ limits: { daily: { capacity: 0, refillPerSecond: 1 } } })).toThrow(/policies\.api\.limits\.daily\.capacity must be an integer from 1 to 1e9, got 0/);
    expect(make({ limits: { daily: { capacity: 1, refillPerSecond: 'x' } } })).toThrow(/policies\.api\.limits\.daily\.refillPerSecond/);
    expect(make({ limits: { 'a.b': { capacity: 1, refillPerSecond: 1 } } })).toThrow(/policies\.api\.limits\.a\.b a limit name must match/);
    expect(make({ limits: {} })).toThrow(/policies\.api\.limits must name 1 to 8 limits, got 0/);
    expect(make({ capacity: 1, refillPerSecond: 1, limits: { a: { capacity: 1, refillPerSecond: 1 } } })).toThrow(/policies\.api\.limits replaces capacity and refillPerSecond/);
    expect(make({ limits: { a: { capacity: 1, refillPerSecond: 1, burst: 2 } } })).toThrow(/policies\.api\.limits\.a\.burst is not a known field/);
    expect(make({ limits: { a: { capacity: 5, refillPerSecond: 1 }, b: { capacity: 5, refillPerSecond: 1 } }, lease: { tokens: 2, maxAgeMs: 100 } })).toThrow(ConfigError);
    expect(make({ limits: { a: { capacity: 5, refillPerSecond: 1 }, b: { capacity: 5, refillPerSecond: 1 } }, lease: { tokens: 2, maxAgeMs: 100 } })).toThrow(/policies\.api\.lease is for a policy with one limit/);
    // The local fallback of a policy with several limits names each, or divides each by expectedNodes.
    const local = createLimiter({
      store: memoryStore(),
      expectedNodes: 4,
      policies: { api: { limits: { s: { capacity: 10, refillPerSecond: 10 }, d: { capacity: 1000, refillPerSecond: 1 } }, onStoreError: 'local' } },
    });
    expect(local.policy('api')!.local!.limits.map((l) => [l.name, l.capacity, l.refillPerSecond])).toEqual([
      ['s', 2, 2.5],
      ['d', 250, 0.25],
    ]);
    expect(make({ limits: { s: { capacity: 10, refillPerSecond: 10 } }, onStoreError: 'local', local: { limits: { s: { capacity: 2, refillPerSecond: 1 }, x: { capacity: 1, refillPerSecond: 1 } } } })).toThrow(
      /policies\.api\.local\.limits\.x names no limit of this policy/,
    );
  });
});

describe('the deny cache with several limits', () => {
  it('answers only a request that asks at least as much of every limit, with every limit recomputed, and never one the store would allow', async () => {
    const store = switchableStore(STILL);
    const limiter = createLimiter({ store, denyCache: true, policies: POLICIES });
    await limiter.take('llm', 'k', { cost: { requests: 3, tokens: 100 } }); // requests empty, tokens 900
    const refused = await limiter.take('llm', 'k', { cost: { requests: 1, tokens: 10 } });
    expect(refused.allowed).toBe(false);
    expect(refused.limits?.map((l) => l.retryAfterMs > 0)).toEqual([true, false]);
    const calls = store.calls;
    // At least as much of every limit: refused from the cache, with the store's numbers recomputed.
    const cached = await limiter.take('llm', 'k', { cost: { requests: 1, tokens: 20 } });
    expect(cached).toMatchObject({ allowed: false, reason: 'deny_cache' });
    expect(cached.limits?.map((l) => l.remaining)).toEqual([0, 900]);
    expect(store.calls).toBe(calls);
    // Less of one limit (no request, only tokens): the store decides, and allows it.
    const tokensOnly = await limiter.take('llm', 'k', { cost: { tokens: 500 } });
    expect(tokensOnly).toMatchObject({ allowed: true });
    expect(tokensOnly.reason).toBeUndefined();
    expect(store.calls).toBe(calls + 1);
  });
});

describe('several limits: found by a hostile review', () => {
  it('a limit a take does not charge never holds it back: waitMs stays within maxWaitMs, and acquire within its timeout', async () => {
    const limiter = createLimiter({ store: memoryStore(), policies: POLICIES });
    // A debt of 2,000 tokens beyond empty on `tokens` (2 minutes to repay)...
    await limiter.adjust('llm', 'k', { tokens: 3000 });
    // ...does not delay a take that charges only `requests`.
    expect(await limiter.take('llm', 'k', { cost: { requests: 1 }, maxWaitMs: 0 })).toMatchObject({ allowed: true, waitMs: 0 });
    const t0 = performance.now();
    const d = await limiter.acquire('llm', 'k', { cost: { requests: 1 }, timeoutMs: 100 });
    expect(d.waitMs).toBe(0);
    expect(performance.now() - t0).toBeLessThan(100);
    // A take that charges `tokens` waits its debt out, as long as maxWaitMs allows.
    expect((await limiter.take('llm', 'k', { cost: { tokens: 1 }, maxWaitMs: 1000 })).allowed).toBe(false);
  });

  it('settle() settles nothing against the store for a permit the store did not decide (fail open, local), and keeps the work\'s error', async () => {
    for (const onStoreError of ['allow', 'local'] as const) {
      const store = switchableStore(STILL);
      const limiter = createLimiter({ store, circuitBreaker: false, policies: { llm: { ...POLICIES.llm, onStoreError } } });
      // Another caller uses the whole token budget while the store answers.
      await limiter.take('llm', 'k', { cost: { tokens: 1000 } });
      store.down = true;
      const settled = settle(limiter, { policy: 'llm', key: 'k', estimate: { tokens: 500 }, actual: () => ({ tokens: 10 }) }, async () => {
        store.down = false; // back before the work ends
        return 'ok';
      });
      expect(await settled).toBe('ok');
      // Nothing was refunded: the store never charged the 500 estimated.
      expect((await limiter.peek('llm', 'k')).limits?.map((l) => l.remaining)).toEqual([3, 0]);
    }
    // The work fails, and so does the refund: the work's error is what the caller sees.
    const store = switchableStore();
    const limiter = createLimiter({ store, circuitBreaker: false, policies: POLICIES });
    await expect(
      settle(limiter, { policy: 'llm', key: 'k', estimate: { tokens: 5 }, actual: () => ({ tokens: 5 }) }, async () => {
        store.down = true;
        throw new Error('LLM call failed: 500');
      }),
    ).rejects.toThrow('LLM call failed: 500');
  });

  it('"cost": null is a 400, not a cost of 1, on both routes', async () => {
    const { send, store } = setup();
    for (const path of ['/v1/permits', '/v1/adjustments']) {
      const res = await send(path, { policy: 'llm', key: 'k', cost: null });
      expect(res.status, path).toBe(400);
      expect(await res.json()).toMatchObject({ field: 'cost' });
    }
    expect(store.calls).toBe(0);
  });
});
