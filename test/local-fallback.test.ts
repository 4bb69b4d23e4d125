// onStoreError 'local': while the store fails, each node decides from its own bucket per key with the
// policy's local limit (exactly, on a fake clock), marked reason 'local'; the store's first answer drops
// every local bucket. Configuration that cannot work fails at start-up naming the field.
import { describe, expect, it } from 'vitest';
import { Hono } from 'hono';
import { ConfigError, createLimiter, memoryStore, type Store } from '../src/index.js';
import { rateLimit } from '../src/hono.js';
import { loadConfig } from '../functions/app/env.js';
import { switchableStore } from './support/switchable-store.js';
import { buildLimiter } from '../functions/app/app.js';

function setup(policy: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  let now = 1_000_000;
  const store = switchableStore(() => now);
  const limiter = createLimiter({
    store,
    monotonicMs: () => now,
    circuitBreaker: false,
    policies: { p: policy as never },
    ...extra,
  });
  return { store, limiter, advance: (ms: number) => (now += ms) };
}

describe("onStoreError 'local'", () => {
  it('decides from a local bucket with the local limit, exactly, while the store fails', async () => {
    const { store, limiter, advance } = setup({ capacity: 100, refillPerSecond: 100, onStoreError: 'local', local: { capacity: 5, refillPerSecond: 2 } });
    expect((await limiter.take('p', 'k')).reason).toBeUndefined(); // the store's answer
    store.down = true;
    const burst = await Promise.all(Array.from({ length: 8 }, () => limiter.take('p', 'k')));
    expect(burst.filter((d) => d.allowed)).toHaveLength(5);
    for (const d of burst) expect(d).toMatchObject({ reason: 'local', limit: 5 });
    expect(burst[5]).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 500 });
    // 2 tokens/s: one more token at 500 ms, not before.
    advance(499);
    expect((await limiter.take('p', 'k')).allowed).toBe(false);
    advance(1);
    expect(await limiter.take('p', 'k')).toMatchObject({ allowed: true, reason: 'local', remaining: 0 });
    // Over 10 s the local bucket admits exactly 2/s more, per key; another key has its own bucket.
    let admitted = 0;
    for (let i = 0; i < 100; i++) {
      advance(100);
      if ((await limiter.take('p', 'k')).allowed) admitted++;
    }
    expect(admitted).toBe(20);
    expect((await limiter.take('p', 'other')).remaining).toBe(4);
    expect(limiter.stats().localKeys).toBe(2);
    // A peek reads the local bucket too, and a reservation waits in it.
    expect(await limiter.peek('p', 'other')).toMatchObject({ reason: 'local', remaining: 4 });
    expect(await limiter.take('p', 'k', { maxWaitMs: 1000 })).toMatchObject({ allowed: true, reason: 'local', waitMs: 500 });
  });

  it('goes back to the store at its first answer; the local buckets go once the store has answered for a refill window', async () => {
    const { store, limiter, advance } = setup({ capacity: 10, refillPerSecond: 1, onStoreError: 'local', local: { capacity: 2, refillPerSecond: 1 } });
    store.down = true;
    await limiter.take('p', 'a');
    await limiter.take('p', 'a');
    expect((await limiter.take('p', 'a')).allowed).toBe(false);
    expect(limiter.stats().localKeys).toBe(1);
    store.down = false;
    // The store never saw those takes: its bucket is full, and its answers carry no reason.
    const d = await limiter.take('p', 'a');
    expect(d).toMatchObject({ allowed: true, remaining: 9, limit: 10 });
    expect(d.reason).toBeUndefined();
    // The local bucket is kept while it could still hold a debt (2 tokens at 1/s: 2 s)...
    expect(limiter.stats().localKeys).toBe(1);
    advance(1999);
    await limiter.take('p', 'b');
    expect(limiter.stats().localKeys).toBe(1);
    // ...and dropped at the first store answer after it is full again.
    advance(1);
    await limiter.take('p', 'b');
    expect(limiter.stats().localKeys).toBe(0);
    // A later outage starts from full local buckets.
    store.down = true;
    expect(await limiter.take('p', 'a')).toMatchObject({ allowed: true, reason: 'local', remaining: 1 });
  });

  it('a store that fails every other call cannot reset the local bucket: each node keeps to the local limit in every window', async () => {
    const { store, limiter, advance } = setup({ capacity: 10, refillPerSecond: 1, onStoreError: 'local', local: { capacity: 5, refillPerSecond: 1 } });
    const local: number[] = [];
    let storeAdmitted = 0;
    for (let i = 0; i < 2000; i++) {
      store.down = i % 2 === 0;
      const d = await limiter.take('p', 'k');
      if (d.allowed && d.reason === 'local') local.push(i);
      else if (d.allowed) storeAdmitted++;
      advance(1);
    }
    // 2 s of flapping (a decision a ms): the local bucket admits its 5 and 1 more, whatever the store
    // answered in between (before, each store answer dropped it, and every local decision was admitted).
    expect(local.length).toBe(6);
    for (let a = 0; a < local.length; a++) {
      for (let b = a; b < local.length; b++) expect(b - a + 1).toBeLessThanOrEqual(5 + (local[b]! - local[a]!) / 1000);
    }
    expect(storeAdmitted).toBe(11);
  });

  it('a reset the store did not apply leaves the local bucket as it is', async () => {
    const { store, limiter } = setup({ capacity: 10, refillPerSecond: 1, onStoreError: 'local', local: { capacity: 3, refillPerSecond: 0.001 } });
    store.down = true;
    for (let i = 0; i < 3; i++) expect((await limiter.take('p', 'k')).allowed).toBe(true);
    (store as { reset: (k: string) => Promise<void> }).reset = async () => {
      throw new Error('down');
    };
    await expect(limiter.reset('p', 'k')).rejects.toThrow('down');
    expect(await limiter.take('p', 'k')).toMatchObject({ allowed: false, reason: 'local' });
  });

  it('covers timeouts, the open circuit and the pending cap, not only errors', async () => {
    let now = 0;
    const inner = memoryStore({ nowMs: () => now });
    let hang = false;
    const store: Store = {
      name: 'hangs',
      step: (key, args) => (hang ? new Promise(() => {}) : inner.step(key, args)),
      reset: (key) => inner.reset(key),
      ping: async () => {},
    };
    const limiter = createLimiter({
      store,
      timeoutMs: 30,
      maxPendingStoreCalls: 2,
      circuitBreaker: { failureThreshold: 1, cooldownMs: 60_000 },
      policies: { p: { capacity: 10, refillPerSecond: 1, onStoreError: 'local', local: { capacity: 3, refillPerSecond: 1 } } },
    });
    hang = true;
    // Two calls hang (the cap is 2): the third is refused by the cap at once, decided locally.
    const hanging = [limiter.take('p', 'k'), limiter.take('p', 'k')];
    expect(await limiter.take('p', 'k')).toMatchObject({ allowed: true, reason: 'local', remaining: 2 });
    // The two time out after 30 ms: decided locally too (the circuit then opens).
    for (const d of await Promise.all(hanging)) expect(d).toMatchObject({ allowed: true, reason: 'local' });
    expect(limiter.stats().circuit).toBe('open');
    expect(await limiter.take('p', 'k')).toMatchObject({ allowed: false, reason: 'local', remaining: 0 });
  });

  it('the default local limit is the policy divided by expectedNodes; LIMITER_POLICIES and LIMITER_EXPECTED_NODES accept it', () => {
    const a = createLimiter({ store: memoryStore(), expectedNodes: 4, policies: { p: { capacity: 100, refillPerSecond: 10, onStoreError: 'local' } } });
    expect(a.policy('p')!.local).toMatchObject({ capacity: 25, refillPerSecond: 2.5 });
    const b = createLimiter({ store: memoryStore(), policies: { p: { capacity: 7, refillPerSecond: 1, onStoreError: 'local' } } });
    expect(b.policy('p')!.local).toMatchObject({ capacity: 7, refillPerSecond: 1 });
    const c = createLimiter({ store: memoryStore(), onStoreError: 'local', expectedNodes: 3, policies: { p: { capacity: 10, refillPerSecond: 1 } } });
    expect(c.policy('p')!.local).toMatchObject({ capacity: 3, refillPerSecond: 1 / 3 });
    const config = loadConfig({
      LIMITER_POLICIES: '{"api":{"capacity":100,"refillPerSecond":10,"onStoreError":"local","local":{"capacity":20,"refillPerSecond":2}},"b":{"capacity":9,"refillPerSecond":3,"onStoreError":"local"}}',
      LIMITER_EXPECTED_NODES: '3',
    });
    const limiter = buildLimiter(config, memoryStore(), { log: () => {} });
    expect(limiter.policy('api')!.local).toMatchObject({ capacity: 20, refillPerSecond: 2 });
    expect(limiter.policy('b')!.local).toMatchObject({ capacity: 3, refillPerSecond: 1 });
  });

  it('refuses a local block without its numbers, above the policy, or without onStoreError local, naming the field', () => {
    const make = (policy: Record<string, unknown>, extra: Record<string, unknown> = {}) => () =>
      createLimiter({ store: memoryStore(), policies: { p: policy as never }, ...extra });
    const base = { capacity: 10, refillPerSecond: 5, onStoreError: 'local' };
    const cases: [() => unknown, RegExp][] = [
      [make({ ...base, local: {} }), /policies\.p\.local\.capacity must be an integer from 1 to the policy's capacity \(10\), got undefined/],
      [make({ ...base, local: { capacity: 2 } }), /policies\.p\.local\.refillPerSecond must be a number from 1e-6 to the policy's refillPerSecond \(5\), got undefined/],
      [make({ ...base, local: { capacity: 11, refillPerSecond: 1 } }), /policies\.p\.local\.capacity .* got 11/],
      [make({ ...base, local: { capacity: 2, refillPerSecond: 5.5 } }), /policies\.p\.local\.refillPerSecond .* got 5\.5/],
      [make({ ...base, local: { capacity: 2, refillPerSecond: 1, burst: 3 } }), /policies\.p\.local\.burst is not a known field/],
      [make({ ...base, local: 'half' }), /policies\.p\.local must be an object/],
      [make({ capacity: 10, refillPerSecond: 5, local: { capacity: 2, refillPerSecond: 1 } }), /policies\.p\.local is used only with onStoreError "local"/],
      [make({ capacity: 3, refillPerSecond: 5, onStoreError: 'local' }, { expectedNodes: 4 }), /policies\.p\.local is needed: the default .* expectedNodes = 4/],
      [make({ capacity: 3, refillPerSecond: 5, onStoreError: 'locally' }), /policies\.p\.onStoreError must be "deny", "allow" or "local"/],
      [make({ capacity: 3, refillPerSecond: 5 }, { expectedNodes: 0 }), /expectedNodes must be an integer from 1 to 100000/],
      // A local rate that no exact bucket of that capacity can hold names the local field, not the policy's.
      [make({ capacity: 1e9, refillPerSecond: 1, onStoreError: 'local', local: { capacity: 1e9, refillPerSecond: 1 / 3 } }), /policies\.p\.local\.refillPerSecond is too slow/],
    ];
    for (const [fn, message] of cases) {
      expect(fn).toThrow(ConfigError);
      expect(fn).toThrow(message);
    }
    expect(() => loadConfig({ LIMITER_EXPECTED_NODES: 'many' })).toThrow(/LIMITER_EXPECTED_NODES must be an integer from 1 to 100000/);
    const bad = loadConfig({ LIMITER_POLICIES: '{"api":{"capacity":10,"refillPerSecond":1,"onStoreError":"local","local":{"capacity":20,"refillPerSecond":1}}}' });
    expect(() => buildLimiter(bad, memoryStore(), { log: () => {} })).toThrow(/LIMITER_POLICIES\.api\.local\.capacity/);
  });

  it('the middleware marks local answers, and their headers carry the local limit', async () => {
    const { store, limiter } = setup({ capacity: 100, refillPerSecond: 10, onStoreError: 'local', local: { capacity: 1, refillPerSecond: 0.5 } });
    const app = new Hono().use(rateLimit({ limiter, policy: 'p', key: () => 'client' })).get('/', (c) => c.text('ok'));
    expect((await app.request('/')).headers.get('RateLimit-Policy')).toBe('"p";q=100;w=10');
    store.down = true;
    const ok = await app.request('/');
    expect(ok.status).toBe(200);
    expect(ok.headers.get('X-RateLimit-Reason')).toBe('local');
    expect(ok.headers.get('RateLimit-Policy')).toBe('"p";q=1;w=2');
    expect(ok.headers.get('X-RateLimit-Limit')).toBe('1');
    expect(ok.headers.get('RateLimit')).toBe('"p";r=0;t=2');
    const refused = await app.request('/');
    expect(refused.status).toBe(429);
    expect(refused.headers.get('X-RateLimit-Reason')).toBe('local');
    expect(refused.headers.get('Retry-After')).toBe('2');
  });
});
