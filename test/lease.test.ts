// Token leases on a fake clock: the store is a memory store whose clock is the same fake, wrapped so
// each test can count its calls and hold them in flight. Timers are vitest's fake ones, moved with the
// clock (`advance`). No sleeping.
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ConfigError, createLimiter, memoryStore, type Decision, type LimitConfig, type PolicyConfig, type Store } from '../src/index.js';

interface Held {
  key: string;
  args: Parameters<Store['step']>[1];
  release(): void;
}

/** A memory store on `clock`, counting calls by kind; with `hold`, calls wait until released. */
function testStore(clock: { now: number }) {
  const inner = memoryStore({ nowMs: () => clock.now });
  const s = {
    name: 'test',
    grants: 0,
    refunds: 0,
    takes: 0,
    /** Tokens asked for by each grant, in order. */
    asked: [] as number[],
    hold: false,
    held: [] as Held[],
    step(key: string, args: Parameters<Store['step']>[1]) {
      if (args.tokenUnits !== undefined) {
        s.grants++;
        s.asked.push(args.limits[0]!.costUnits / args.tokenUnits);
      }
      else if (args.limits[0]!.costUnits < 0) s.refunds++;
      else s.takes++;
      if (!s.hold) return inner.step(key, args);
      return new Promise<Awaited<ReturnType<Store['step']>>>((resolve) => {
        s.held.push({ key, args, release: () => resolve(inner.stepSync(key, args)) });
      });
    },
    releaseAll() {
      const h = s.held;
      s.held = [];
      for (const x of h) x.release();
    },
    reset: (key: string) => inner.reset(key),
    ping: async () => {},
    calls: () => s.grants + s.refunds + s.takes,
  };
  return s;
}

const flush = () => new Promise((r) => setImmediate(r));

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
});
afterEach(() => {
  vi.useRealTimers();
});

function setup(policy: PolicyConfig & LimitConfig, nodes = 1) {
  const clock = { now: 1_790_000_000_000 };
  const store = testStore(clock);
  const limiters = Array.from({ length: nodes }, () =>
    createLimiter({ store, policies: { hot: policy, plain: { capacity: policy.capacity, refillPerSecond: policy.refillPerSecond } }, monotonicMs: () => clock.now }),
  );
  /** Moves the fake clock and the fake timers together. */
  const advance = (ms: number) => {
    clock.now += ms;
    vi.advanceTimersByTime(ms);
  };
  return { clock, store, limiter: limiters[0]!, limiters, advance };
}

describe('token leases', () => {
  it('answers a hot key from its lease: 130 takes on a bucket of 100 at one instant admit exactly 100, with far fewer store calls than takes', async () => {
    const { store, limiter } = setup({ capacity: 100, refillPerSecond: 10, lease: { tokens: 10, maxAgeMs: 5000 } });
    const got: Decision[] = [];
    for (let i = 0; i < 130; i++) got.push(await limiter.take('hot', 'k'));
    expect(got.filter((d) => d.allowed)).toHaveLength(100);
    // The key's first take is a plain one (a key seen once is not hot); then grants, growing with the
    // demand, each at most tokens - held (5 once the background grants start at the low-water mark).
    expect(store.takes).toBe(1);
    expect(Math.max(...store.asked)).toBeLessThanOrEqual(10);
    expect(store.calls()).toBeLessThanOrEqual(130 / 4);
    expect(got.filter((d) => d.reason === 'lease').length).toBeGreaterThanOrEqual(90);
    // The 30 refusals: after a grant found the store empty, locally until a token exists (100 ms).
    const refusals = got.filter((d) => !d.allowed);
    expect(refusals.every((d) => d.retryAfterMs === 100)).toBe(true);
  });

  it('after its first grant (tokens), a lease asks for this node\'s demand over one usable age: no more than it can use before the tokens age out', async () => {
    // 100/s, tokens 100: the usable age is min(maxAgeMs, 1 s) = 1 s.
    const { store, limiter, advance } = setup({ capacity: 1000, refillPerSecond: 100, lease: { tokens: 100, maxAgeMs: 5000 } });
    await limiter.take('hot', 'k'); // plain: first sight
    await limiter.take('hot', 'k'); // the key is hot: a first grant of tokens (100), one used
    for (let i = 0; i < 9; i++) {
      advance(100);
      expect(await limiter.take('hot', 'k')).toMatchObject({ allowed: true, reason: 'lease' });
    }
    expect(limiter.stats().leases.tokens).toBe(90);
    advance(100); // the grant is 1 s old: its 90 unused tokens age out (the bucket has refilled 100 since)
    expect(limiter.stats().leases.tokens).toBe(0);
    expect((await limiter.take('hot', 'k')).allowed).toBe(true);
    // Demand: 11 takes in the last usable age and this one: a grant of 12, not 100.
    expect(store.asked).toEqual([100, 12]);
    expect(store.refunds).toBe(0);
  });

  it('a local answer carries the lease view: remaining = tokens left on this node, and X-RateLimit-Reason lease', async () => {
    const { limiter } = setup({ capacity: 50, refillPerSecond: 1, lease: { tokens: 10, maxAgeMs: 5000, lowWater: 0 } });
    expect(await limiter.take('hot', 'k', { cost: 10 })).toMatchObject({ allowed: true, remaining: 40 }); // plain: first sight
    const first = await limiter.take('hot', 'k'); // waits for a grant of 10 (demand 11, at most tokens)
    expect(first).toMatchObject({ allowed: true, remaining: 9 });
    expect(first.reason).toBeUndefined();
    const second = await limiter.take('hot', 'k');
    expect(second).toMatchObject({ allowed: true, remaining: 8, reason: 'lease', waitMs: 0 });
    // The store holds 30; the bucket is 20 tokens (20 s) below full.
    expect(second.resetAfterMs).toBe(20_000);
    expect((await limiter.peek('hot', 'k')).remaining).toBe(30);
  });

  it('grants partially when fewer tokens exist, then refuses with the store-exact retryAfterMs', async () => {
    const { clock, store, limiter } = setup({ capacity: 3, refillPerSecond: 2, lease: { tokens: 3, maxAgeMs: 5000 } });
    expect((await limiter.take('hot', 'k', { cost: 2 })).allowed).toBe(true); // plain (first sight): 1 left
    const d = await limiter.take('hot', 'k', { cost: 2 }); // a grant of 1 of 3 (partial), store empty
    expect(store.grants).toBe(1);
    expect(d).toMatchObject({ allowed: false, remaining: 1, retryAfterMs: 500 });
    clock.now += 499;
    expect(await limiter.take('hot', 'k', { cost: 2 })).toMatchObject({ allowed: false, reason: 'lease' });
    expect(store.grants).toBe(1); // refused locally: the store said empty for 500 ms
    clock.now += 1;
    expect((await limiter.take('hot', 'k', { cost: 2 })).allowed).toBe(true); // 1 in the lease + a grant of 1
    expect(store.asked).toEqual([3, 2]); // the second asked for at most tokens - held
    expect(store.takes).toBe(1);
  });

  it('a cost above the lease size goes straight to the store', async () => {
    const { store, limiter } = setup({ capacity: 20, refillPerSecond: 1, lease: { tokens: 5, maxAgeMs: 5000 } });
    expect((await limiter.take('hot', 'k', { cost: 6 })).allowed).toBe(true);
    expect(store.grants).toBe(0);
    expect(store.takes).toBe(1);
  });

  it('a refund never makes the bucket fuller than full, and after close() leased policies go to the store', async () => {
    const { store, limiter } = setup({ capacity: 20, refillPerSecond: 1, lease: { tokens: 10, maxAgeMs: 1000, lowWater: 0 } });
    await limiter.take('hot', 'k', { cost: 10 }); // plain
    await limiter.take('hot', 'k'); // a lease of 10, 9 left
    await store.reset('el:hot:k'); // full behind the lease's back
    await limiter.close(); // refunds 9 to a full bucket
    expect((await limiter.peek('hot', 'k')).remaining).toBe(20);
    const takesBefore = store.takes;
    const afterClose = await limiter.take('hot', 'k');
    expect(afterClose).toMatchObject({ allowed: true, remaining: 19 });
    expect(afterClose.reason).toBeUndefined();
    expect(store.takes).toBe(takesBefore + 1);
  });

  it('refills in the background at the low-water mark: the hot path never waits while the grant is in flight', async () => {
    const { store, limiter } = setup({ capacity: 1000, refillPerSecond: 100, lease: { tokens: 10, maxAgeMs: 5000, lowWater: 5 } });
    await limiter.take('hot', 'k', { cost: 10 }); // plain: first sight
    await limiter.take('hot', 'k'); // the first grant (in the foreground), 9 left
    store.hold = true;
    for (let i = 0; i < 4; i++) await limiter.take('hot', 'k'); // 5 left: low water, a grant starts
    expect(store.held).toHaveLength(1);
    // It asks for tokens - held: the lease never holds more than tokens, the grant in flight included.
    expect(store.asked).toEqual([10, 5]);
    // The 5 left are answered with the grant still in flight, and no second grant is started.
    let settled = 0;
    for (let i = 0; i < 5; i++) void limiter.take('hot', 'k').then((d) => (d.allowed ? settled++ : 0));
    await flush();
    expect(settled).toBe(5);
    expect(store.held).toHaveLength(1);
    // An empty lease joins the grant in flight rather than asking again.
    const waiting = limiter.take('hot', 'k');
    await flush();
    expect(store.held).toHaveLength(1);
    store.releaseAll();
    expect((await waiting).allowed).toBe(true);
    expect(store.grants).toBe(2);
  });

  it('a burst on an empty lease: takes the grant in flight covers wait for it, the rest go to the store, and none is refused while tokens exist', async () => {
    const { store, limiter } = setup({ capacity: 100, refillPerSecond: 1, lease: { tokens: 10, maxAgeMs: 5000 } });
    await limiter.take('hot', 'k', { cost: 10 }); // plain: first sight
    store.hold = true;
    const pending = Array.from({ length: 35 }, () => limiter.take('hot', 'k'));
    await flush();
    // One grant of 10 (covering 10 takes) and 25 plain takes, all in flight at once: one round trip.
    expect({ grants: store.grants, takes: store.takes }).toEqual({ grants: 1, takes: 26 });
    store.releaseAll();
    const got = await Promise.all(pending);
    expect(got.every((d) => d.allowed)).toBe(true);
    expect(limiter.stats().leases.tokens).toBe(0);
  });

  it('a key asked for once is decided by a plain store call: no grant, no refund (cold keys cost what they cost without leases)', async () => {
    const { store, limiter } = setup({ capacity: 100, refillPerSecond: 1, lease: { tokens: 10, maxAgeMs: 5000 } });
    for (let i = 0; i < 50; i++) await limiter.take('hot', `cold-${i}`);
    await limiter.close();
    expect({ takes: store.takes, grants: store.grants, refunds: store.refunds }).toEqual({ takes: 50, grants: 0, refunds: 0 });
  });

  it('hands background work to waitUntil', async () => {
    const { limiter } = setup({ capacity: 100, refillPerSecond: 1, lease: { tokens: 4, maxAgeMs: 5000, lowWater: 2 } });
    const handed: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void handed.push(p);
    await limiter.take('hot', 'k', { cost: 4, waitUntil }); // plain
    await limiter.take('hot', 'k', { waitUntil }); // the first grant (of 4): awaited by the take, and handed over too
    // The grant ages out after 4 s, when the bucket has refilled its 4 tokens: nothing to refund, so
    // no request is kept alive for it.
    expect(handed).toHaveLength(1);
    await Promise.all(handed);
    handed.length = 0;
    await limiter.take('hot', 'k', { waitUntil }); // 2 left: the low-water grant goes to waitUntil
    expect(handed).toHaveLength(1);
    await Promise.all(handed);
    expect(limiter.stats().leases.tokens).toBe(4);
  });

  it('acquire: a lease with tokens answers at once; a reservation on an empty lease goes to the store (FIFO there)', async () => {
    const { store, limiter } = setup({ capacity: 3, refillPerSecond: 10, lease: { tokens: 2, maxAgeMs: 5000, lowWater: 0 } });
    expect((await limiter.acquire('hot', 'k', { timeoutMs: 1000 })).waitMs).toBe(0); // plain: first sight
    expect((await limiter.take('hot', 'k')).allowed).toBe(true); // a grant of 2, one used
    expect(await limiter.acquire('hot', 'k', { timeoutMs: 1000 })).toMatchObject({ waitMs: 0, reason: 'lease' });
    await flush(); // the background grant found the store empty
    const before = store.takes;
    const d = await limiter.take('hot', 'k', { maxWaitMs: 1000 });
    expect(d).toMatchObject({ allowed: true, waitMs: 100 });
    expect(store.takes).toBe(before + 1);
  });

  it('a store failure during a grant follows the fail mode', async () => {
    const clock = { now: 1_790_000_000_000 };
    const failing: Store = { name: 'down', step: async () => Promise.reject(new Error('ECONNREFUSED')), reset: async () => {}, ping: async () => {} };
    const limiter = createLimiter({
      store: failing,
      policies: { closed: { capacity: 10, refillPerSecond: 1, lease: { tokens: 5, maxAgeMs: 1000 } }, open: { capacity: 10, refillPerSecond: 1, onStoreError: 'allow', lease: { tokens: 5, maxAgeMs: 1000 } } },
      monotonicMs: () => clock.now,
      circuitBreaker: false,
    });
    for (let i = 0; i < 2; i++) {
      // The key's first take (plain), then one waiting for a grant that fails.
      expect(await limiter.take('closed', 'k')).toMatchObject({ allowed: false, reason: 'store_error' });
      expect(await limiter.take('open', 'k')).toMatchObject({ allowed: true, reason: 'store_error' });
    }
  });

  it('reset drops this node’s lease', async () => {
    const { limiter } = setup({ capacity: 10, refillPerSecond: 1, lease: { tokens: 5, maxAgeMs: 5000 } });
    await limiter.take('hot', 'k', { cost: 5 });
    await limiter.take('hot', 'k');
    expect(limiter.stats().leases.tokens).toBe(4);
    await limiter.reset('hot', 'k');
    expect(limiter.stats().leases.tokens).toBe(0);
    expect((await limiter.peek('hot', 'k')).remaining).toBe(10);
  });

  it('maxKeys bounds the leases; the oldest gives its tokens back', async () => {
    const clock = { now: 1_790_000_000_000 };
    const store = testStore(clock);
    const limiter = createLimiter({ store, policies: { hot: { capacity: 10, refillPerSecond: 1, lease: { tokens: 5, maxAgeMs: 60_000 } } }, monotonicMs: () => clock.now, leases: { maxKeys: 2 } });
    for (const k of ['a', 'a', 'b', 'b', 'c', 'c']) await limiter.take('hot', k);
    await flush();
    // 'c' arrived when a and b held leases: a gave its 4 back; c's empty lease then took the place.
    expect(limiter.stats().leases).toEqual({ keys: 2, tokens: 8 });
    expect(store.refunds).toBe(1);
    expect((await limiter.peek('hot', 'a')).remaining).toBe(8);
  });

  it('rejects invalid lease settings naming the field', () => {
    const store = memoryStore();
    const make = (lease: unknown) => () => createLimiter({ store, policies: { p: { capacity: 10, refillPerSecond: 1, lease } as PolicyConfig } });
    expect(make({ tokens: 11, maxAgeMs: 1000 })).toThrow(ConfigError);
    expect(make({ tokens: 11, maxAgeMs: 1000 })).toThrow(/policies\.p\.lease\.tokens/);
    expect(make({ tokens: 5, maxAgeMs: 0 })).toThrow(/policies\.p\.lease\.maxAgeMs/);
    expect(make({ tokens: 5, maxAgeMs: 1000, lowWater: 5 })).toThrow(/policies\.p\.lease\.lowWater/);
    expect(make({ tokens: 5, maxAgeMs: 1000, extra: 1 })).toThrow(/policies\.p\.lease\.extra/);
    expect(make(5)).toThrow(/policies\.p\.lease/);
    expect(() => createLimiter({ store, policies: { p: { capacity: 1, refillPerSecond: 1 } }, leases: { maxKeys: 0 } })).toThrow(/leases\.maxKeys/);
  });

  it('several nodes on one bucket: never over-admit; under-admission at most nodes x tokens (any interleaving)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 5, max: 100 }),
        fc.integer({ min: 1, max: 200 }),
        fc.array(fc.record({ node: fc.nat(3), dtMs: fc.integer({ min: 0, max: 40 }) }), { minLength: 50, maxLength: 400 }),
        async (nodes, tokensPick, capacity, ratePerSecond, ops) => {
          const tokens = Math.min(tokensPick, capacity);
          const { clock, limiters } = setup({ capacity, refillPerSecond: ratePerSecond, lease: { tokens, maxAgeMs: 200 } }, nodes);
          // Saturating demand: at every step one node asks until refused. The reference is the same
          // demand on a plain bucket (no lease) of the same policy, on the same store and clock.
          const drain = async (policy: 'hot' | 'plain', node: number) => {
            let n = 0;
            for (let i = 0; i < capacity + 2; i++) {
              if (!(await limiters[node]!.take(policy, 'k')).allowed) break;
              n++;
            }
            return n;
          };
          let leased = 0;
          let plain = 0;
          let elapsed = 0;
          for (const op of ops) {
            clock.now += op.dtMs;
            elapsed += op.dtMs;
            leased += await drain('hot', op.node % nodes);
            plain += await drain('plain', op.node % nodes);
            await flush();
            expect(leased).toBeLessThanOrEqual(capacity + Math.floor((ratePerSecond * elapsed) / 1000 + 1e-9));
            expect(leased).toBeLessThanOrEqual(plain + nodes * tokens);
          }
          expect(plain - leased).toBeLessThanOrEqual(nodes * tokens);
        },
      ),
      { numRuns: 150 },
    );
  });
});
