// Leased tokens go back on time and all of them: close() past the pending cap, an idle node's aged
// grants, the deny cache after a refund, a grant lost to a timeout, and no take waiting on two store
// calls. Fake clocks and vitest's fake timers, moved together; no sleeping.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLimiter, memoryStore, type Decision, type PolicyConfig, type Store, type StoreStatusEvent } from '../src/index.js';

const flush = () => new Promise((r) => setImmediate(r));

type Args = Parameters<Store['step']>[1];

/** A remote-looking store (not in-process) over a memory store on `clock`, counting calls by kind. */
function remoteStore(clock: { now: number }) {
  const inner = memoryStore({ nowMs: () => clock.now });
  const s = {
    name: 'remote',
    grants: 0,
    refunds: 0,
    takes: 0,
    asked: [] as number[],
    refundsInFlight: 0,
    maxRefundsInFlight: 0,
    /** Answer each call one turn later (a round trip), instead of at once. */
    slow: false,
    /** Hold every call until released. */
    hold: false,
    held: [] as (() => void)[],
    /** Apply the next grant in the store but never answer it (a reply lost after Redis ran the script). */
    loseNextGrant: false,
    step(key: string, args: Args): Promise<Awaited<ReturnType<Store['step']>>> {
      if (args.tokenUnits !== undefined) {
        s.grants++;
        s.asked.push(args.limits[0]!.costUnits / args.tokenUnits);
        if (s.loseNextGrant) {
          s.loseNextGrant = false;
          inner.stepSync(key, args);
          return new Promise(() => {});
        }
      } else if (args.limits[0]!.costUnits < 0) {
        s.refunds++;
        s.refundsInFlight++;
        s.maxRefundsInFlight = Math.max(s.maxRefundsInFlight, s.refundsInFlight);
      } else s.takes++;
      const answer = () => {
        if (args.limits[0]!.costUnits < 0) s.refundsInFlight--;
        return inner.stepSync(key, args);
      };
      if (s.hold) return new Promise((resolve) => s.held.push(() => resolve(answer())));
      if (s.slow) return new Promise((resolve) => setImmediate(() => resolve(answer())));
      return Promise.resolve(answer());
    },
    releaseAll() {
      const h = s.held;
      s.held = [];
      for (const release of h) release();
    },
    reset: (key: string) => inner.reset(key),
    ping: async () => {},
    calls: () => s.grants + s.refunds + s.takes,
  };
  return s;
}

function setup(policy: PolicyConfig, options: { denyCache?: boolean; timeoutMs?: number; maxPendingStoreCalls?: number } = {}) {
  const clock = { now: 1_790_000_000_000 };
  const store = remoteStore(clock);
  const events: StoreStatusEvent[] = [];
  const limiter = createLimiter({
    store,
    policies: { hot: policy },
    monotonicMs: () => clock.now,
    onStoreStatus: (e) => events.push(e),
    ...options,
  });
  const advance = (ms: number) => {
    clock.now += ms;
    vi.advanceTimersByTime(ms);
  };
  return { clock, store, limiter, events, advance };
}

describe('close() gives every leased token back', () => {
  it('3,000 leased keys, more than maxPendingStoreCalls (16 here): 3,000 refunds reach the store, at most 32 at a time, and no outage is reported', async () => {
    const { store, limiter, events } = setup({ capacity: 10, refillPerSecond: 1, lease: { tokens: 5, maxAgeMs: 60_000 } }, { maxPendingStoreCalls: 16 });
    store.slow = true;
    const keys = Array.from({ length: 3000 }, (_, i) => `k${i}`);
    for (let i = 0; i < keys.length; i += 16) {
      const chunk = keys.slice(i, i + 16);
      await Promise.all(chunk.map((k) => limiter.take('hot', k))); // plain: first sight
      await Promise.all(chunk.map((k) => limiter.take('hot', k))); // a grant of 5, one used
    }
    expect(limiter.stats().leases).toEqual({ keys: 3000, tokens: 3000 * 4 });
    await limiter.close();
    expect(store.refunds).toBe(3000);
    expect(store.maxRefundsInFlight).toBeLessThanOrEqual(32);
    expect(events).toEqual([]);
    // Every bucket has its 4 unused tokens back: 10 - 1 (plain take) - 1 (used of the grant).
    for (const k of ['k0', 'k1499', 'k2999']) expect((await limiter.peek('hot', k)).remaining).toBe(8);
  });
});

describe('an idle node returns aged grants on time', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('with no decision at all, a grant past its usable age goes back (less what the bucket refilled since)', async () => {
    // 1/s, tokens 10, maxAgeMs 1000: the usable age is 1 s, and 1 token refills in it.
    const { store, limiter, advance } = setup({ capacity: 20, refillPerSecond: 1, lease: { tokens: 10, maxAgeMs: 1000 } });
    await limiter.take('hot', 'k'); // plain
    await limiter.take('hot', 'k'); // a grant of 10, 9 left in the lease
    expect((await limiter.peek('hot', 'k')).remaining).toBe(9);
    advance(1000);
    await flush();
    expect(store.refunds).toBe(1);
    expect(limiter.stats().leases.tokens).toBe(0);
    // 9 in the store + 1 refilled + the 9 unused less the 1 s of refill since the grant (8).
    expect((await limiter.peek('hot', 'k')).remaining).toBe(18);
  });

  it('on Workers the request that made the grant keeps it alive (waitUntil) until the refund is sent', async () => {
    const { limiter, advance } = setup({ capacity: 20, refillPerSecond: 1, lease: { tokens: 10, maxAgeMs: 1000 } });
    const handed: Promise<unknown>[] = [];
    let done = 0;
    const waitUntil = (p: Promise<unknown>) => void handed.push(p.then(() => done++));
    await limiter.take('hot', 'k', { waitUntil }); // plain
    await limiter.take('hot', 'k', { waitUntil }); // the grant, and its expiry
    await flush();
    expect(handed).toHaveLength(2);
    expect(done).toBe(1); // the grant itself
    advance(1000);
    await Promise.all(handed);
    // The expiry has ended, and the refund it sent was handed over too.
    expect(handed).toHaveLength(3);
    expect((await limiter.peek('hot', 'k')).remaining).toBe(18);
  });

  it("a refund makes this node's deny cache forget its refusal of the key", async () => {
    const { limiter, advance } = setup({ capacity: 20, refillPerSecond: 1, lease: { tokens: 10, maxAgeMs: 1000 } }, { denyCache: true });
    await limiter.take('hot', 'k'); // plain: 19
    await limiter.take('hot', 'k'); // a grant of 10: 9 in the store
    // A cost above the lease size goes to the store: 9 < 15, refused, and cached for 6 s.
    expect(await limiter.take('hot', 'k', { cost: 15 })).toMatchObject({ allowed: false, retryAfterMs: 6000 });
    expect(await limiter.take('hot', 'k', { cost: 15 })).toMatchObject({ allowed: false, reason: 'deny_cache' });
    advance(1000); // the grant ages out: 8 go back, and 1 refilled: 18 in the store
    await flush();
    expect(await limiter.take('hot', 'k', { cost: 15 })).toMatchObject({ allowed: true, remaining: 3 });
  });

  it('a grant lost to a timeout (applied by the store, never answered): until a grant succeeds, the lease asks only for the take waiting on it', async () => {
    const { store, limiter } = setup({ capacity: 100, refillPerSecond: 1, lease: { tokens: 10, maxAgeMs: 60_000 } }, { timeoutMs: 50 });
    await limiter.take('hot', 'k'); // plain
    store.loseNextGrant = true;
    const lost = limiter.take('hot', 'k'); // the first grant (10): the store takes them, the answer never comes
    vi.advanceTimersByTime(50);
    expect(await lost).toMatchObject({ allowed: false, reason: 'store_error' });
    expect((await limiter.peek('hot', 'k')).remaining).toBe(89); // the 10 are lost
    expect(await limiter.take('hot', 'k')).toMatchObject({ allowed: true }); // a grant of 1 only
    expect(await limiter.take('hot', 'k')).toMatchObject({ allowed: true }); // then sized to the demand again
    expect(store.asked).toEqual([10, 1, 4]);
  });
});

describe('a store further away than the usable age', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('a grant answered after its usable age is not used: its take goes to the store, and the key takes plain for maxAgeMs', async () => {
    // 100/s, tokens 10: the usable age is 100 ms; the store answers in 150.
    const { clock, store, limiter } = setup({ capacity: 1000, refillPerSecond: 100, lease: { tokens: 10, maxAgeMs: 1000 } });
    await limiter.take('hot', 'k'); // plain: first sight
    store.hold = true;
    const waiting = limiter.take('hot', 'k'); // a grant of 10
    await flush();
    clock.now += 150;
    store.hold = false;
    store.releaseAll();
    expect(await waiting).toMatchObject({ allowed: true }); // decided by a take of its own
    expect({ grants: store.grants, takes: store.takes }).toEqual({ grants: 1, takes: 2 });
    for (let i = 0; i < 20; i++) {
      clock.now += 45;
      expect((await limiter.take('hot', 'k')).reason).toBeUndefined();
    }
    // 900 ms later still no second grant: each grant would age out on its way, losing its tokens.
    expect(store.grants).toBe(1);
    clock.now += 200;
    await limiter.take('hot', 'k');
    expect(store.grants).toBe(2);
  });
});

describe('no take waits for two store calls', () => {
  for (const costs of [
    [4, 4, 3],
    [4, 2],
  ]) {
    it(`a take waits for the grant in flight only if that grant alone covers it, so it is answered when the grant lands (takes of ${costs.join(', ')})`, async () => {
      const { store, limiter } = setup({ capacity: 1000, refillPerSecond: 100, lease: { tokens: 10, maxAgeMs: 5000, lowWater: 5 } });
      await limiter.take('hot', 'k', { cost: 10 }); // plain: first sight
      await limiter.take('hot', 'k'); // the first grant (10), 9 left
      store.hold = true;
      for (let i = 0; i < 4; i++) await limiter.take('hot', 'k'); // 5 left: a background grant of 5 starts
      expect((await limiter.take('hot', 'k', { cost: 4 })).reason).toBe('lease'); // 1 left
      // These takes cannot be answered now; then a take of 1 uses the last token, which a take waiting
      // on the grant must not count on.
      const pending: Promise<Decision>[] = costs.map((cost) => limiter.take('hot', 'k', { cost }));
      expect(await limiter.take('hot', 'k')).toMatchObject({ allowed: true, reason: 'lease' });
      await flush();
      const callsBeforeAnswers = store.calls();
      store.releaseAll();
      const got = await Promise.all(pending);
      await flush();
      expect(got.every((d) => d.allowed)).toBe(true);
      // Every one of them had its one store call (the grant, or its own take) before any answer came.
      expect(store.calls()).toBe(callsBeforeAnswers);
      expect(store.held).toHaveLength(0);
    });
  }
});
