// Limiter behaviour around the store: timeouts, fail modes, circuit breaker, deny cache, acquire, hooks.
import { describe, expect, it } from 'vitest';
import {
  AcquireTimeoutError,
  ConfigError,
  createLimiter,
  memoryStore,
  StoreError,
  type DecisionEvent,
  type Store,
} from '../src/index.js';

/** A store that can be switched to fail or hang, delegating to a memory store otherwise. */
function faultyStore() {
  const inner = memoryStore();
  const s = {
    name: 'faulty',
    mode: 'ok' as 'ok' | 'error' | 'hang',
    steps: 0,
    pending: 0,
    async step(key: string, args: Parameters<Store['step']>[1]) {
      s.steps++;
      if (s.mode === 'error') throw new Error('ECONNREFUSED');
      if (s.mode === 'hang') {
        s.pending++;
        return new Promise<never>(() => {});
      }
      return inner.step(key, args);
    },
    reset: (key: string) => inner.reset(key),
    ping: async () => {
      if (s.mode !== 'ok') throw new Error('down');
    },
  };
  return s;
}

describe('store failures follow the declared fail mode within the timeout', () => {
  for (const mode of ['error', 'hang'] as const) {
    it(`${mode}: deny policy refuses with reason store_error; allow policy admits with it`, async () => {
      const store = faultyStore();
      const limiter = createLimiter({
        store,
        timeoutMs: 50,
        circuitBreaker: false,
        policies: { closed: { capacity: 5, refillPerSecond: 1 }, open: { capacity: 5, refillPerSecond: 1, onStoreError: 'allow' } },
      });
      store.mode = mode;
      const t0 = performance.now();
      const [closed, open] = await Promise.all([limiter.take('closed', 'k'), limiter.take('open', 'k')]);
      const took = performance.now() - t0;
      expect(closed).toMatchObject({ allowed: false, reason: 'store_error', retryAfterMs: 1000 });
      expect(open).toMatchObject({ allowed: true, reason: 'store_error', retryAfterMs: 0 });
      expect(took).toBeLessThan(mode === 'hang' ? 50 + 100 : 20);
      if (mode === 'hang') expect(took).toBeGreaterThanOrEqual(49);
      store.mode = 'ok';
      expect(await limiter.take('closed', 'k')).toMatchObject({ allowed: true, remaining: 4 });
      expect((await limiter.take('closed', 'k')).reason).toBeUndefined();
    });
  }

  it('the default fail mode is deny', async () => {
    const store = faultyStore();
    store.mode = 'error';
    const limiter = createLimiter({ store, policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    expect(await limiter.take('p', 'k')).toMatchObject({ allowed: false, reason: 'store_error' });
  });

  it('acquire rejects with StoreError when the store is down and the policy fails closed', async () => {
    const store = faultyStore();
    store.mode = 'error';
    const limiter = createLimiter({ store, circuitBreaker: false, policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    await expect(limiter.acquire('p', 'k')).rejects.toBeInstanceOf(StoreError);
  });
});

describe('circuit breaker (fake monotonic clock, no sleeps)', () => {
  it('opens after N consecutive failures, fails fast without calling the store, then probes and closes', async () => {
    const store = faultyStore();
    let now = 0;
    const limiter = createLimiter({
      store,
      monotonicMs: () => now,
      circuitBreaker: { failureThreshold: 3, cooldownMs: 100 },
      policies: { p: { capacity: 100, refillPerSecond: 1 } },
    });
    store.mode = 'error';
    for (let i = 0; i < 3; i++) expect((await limiter.take('p', 'k')).reason).toBe('store_error');
    expect(store.steps).toBe(3);
    for (let i = 0; i < 20; i++) expect(await limiter.take('p', 'k')).toMatchObject({ allowed: false, reason: 'store_error' });
    expect(limiter.stats().circuit).toBe('open');
    expect(store.steps).toBe(3);
    now = 100;
    // Cool-down over: exactly one probe reaches the store while the others still fail fast.
    const burst = await Promise.all([limiter.take('p', 'k'), limiter.take('p', 'k'), limiter.take('p', 'k')]);
    expect(store.steps).toBe(4);
    expect(burst.map((d) => d.reason)).toEqual(['store_error', 'store_error', 'store_error']);
    store.mode = 'ok';
    now = 200;
    for (let i = 0; i < 2; i++) {
      const d = await limiter.take('p', 'k');
      expect(d.allowed).toBe(true);
      expect(d.reason).toBeUndefined();
    }
    expect(store.steps).toBe(6);
  });

  it('lets exactly one probe through even when an older call settles during the probe', async () => {
    // Each store call fails when the test says so: no timers, only deferred promises.
    const failers: (() => void)[] = [];
    const store: Store = {
      name: 'scripted',
      step: () => new Promise((_, reject) => failers.push(() => reject(new Error('down')))),
      reset: async () => {},
      ping: async () => {},
    };
    let now = 0;
    const limiter = createLimiter({ store, monotonicMs: () => now, timeoutMs: 60_000, circuitBreaker: { failureThreshold: 2, cooldownMs: 20 }, policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    const flush = () => new Promise((r) => setImmediate(r));
    const slow = limiter.take('p', 'k'); // call 1, still in flight when the circuit opens
    const second = limiter.take('p', 'k');
    const third = limiter.take('p', 'k');
    await flush();
    failers[1]!();
    failers[2]!();
    await Promise.all([second, third]); // failures = 2: open
    expect(limiter.stats().circuit).toBe('open');
    now = 30;
    const probe = limiter.take('p', 'k'); // call 4: the probe
    await flush();
    expect(failers).toHaveLength(4);
    failers[0]!(); // call 1 fails while the probe is in flight, re-arming the cool-down
    await slow;
    now = 60; // the cool-down is over again, but the probe has not answered yet
    for (let i = 0; i < 5; i++) expect((await limiter.take('p', 'k')).reason).toBe('store_error');
    expect(failers).toHaveLength(4);
    failers[3]!();
    await probe;
  });

  it('validates its options', () => {
    expect(() => createLimiter({ store: memoryStore(), circuitBreaker: { failureThreshold: 0 }, policies: { p: { capacity: 1, refillPerSecond: 1 } } })).toThrow(
      /circuitBreaker\.failureThreshold/,
    );
  });
});

describe('deny cache', () => {
  it('answers repeated denials locally until retryAfterMs, and never admits anything the store would refuse', async () => {
    const store = faultyStore();
    const limiter = createLimiter({ store, denyCache: true, policies: { p: { capacity: 2, refillPerSecond: 10 } } });
    expect((await limiter.take('p', 'k', { cost: 2 })).allowed).toBe(true);
    const first = await limiter.take('p', 'k');
    expect(first).toMatchObject({ allowed: false });
    expect(first.reason).toBeUndefined();
    const stepsAfterFirstDenial = store.steps;
    let admitted = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < first.retryAfterMs - 10) {
      const d = await limiter.take('p', 'k');
      if (d.allowed) admitted++;
      expect(d.reason).toBe('deny_cache');
      await new Promise((r) => setTimeout(r, 1));
    }
    expect(admitted).toBe(0);
    expect(store.steps).toBe(stepsAfterFirstDenial);
    await new Promise((r) => setTimeout(r, 30));
    expect(await limiter.take('p', 'k')).toMatchObject({ allowed: true });
    expect(store.steps).toBe(stepsAfterFirstDenial + 1);
  });

  it('lets a smaller cost through to the store', async () => {
    const store = faultyStore();
    const limiter = createLimiter({ store, denyCache: true, policies: { p: { capacity: 10, refillPerSecond: 1 } } });
    await limiter.take('p', 'k', { cost: 8 });
    expect((await limiter.take('p', 'k', { cost: 5 })).allowed).toBe(false);
    expect(await limiter.take('p', 'k', { cost: 2 })).toMatchObject({ allowed: true, remaining: 0 });
  });
});

describe('acquire', () => {
  it('reserves in one store call, then sleeps; callers are given slots one interval apart in FIFO order, and none starts early', async () => {
    const store = faultyStore();
    // When the store was asked: the reservations' clock readings lie between the first call and the last return.
    let firstCall = Infinity;
    let lastReturn = 0;
    const inner = store.step;
    store.step = async (key, args) => {
      firstCall = Math.min(firstCall, performance.now());
      const r = await inner(key, args);
      lastReturn = performance.now();
      return r;
    };
    const limiter = createLimiter({ store, policies: { p: { capacity: 1, refillPerSecond: 20 } } });
    const t0 = performance.now();
    const waits: number[] = [];
    const starts: number[] = [];
    await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        limiter.acquire('p', 'k', { timeoutMs: 1000 }).then((d) => {
          starts[i] = performance.now() - t0;
          waits[i] = d.waitMs;
        }),
      ),
    );
    expect(store.steps).toBe(5);
    // The slots come from the store: caller i waits i intervals of 50 ms, less the time between the first
    // reservation and its own. Wake-ups are only bounded below (a loaded machine runs a timer late, never
    // early), so the test does not depend on timer jitter.
    const spread = Math.ceil(lastReturn - firstCall);
    expect(waits[0]).toBe(0);
    for (let i = 1; i < 5; i++) {
      expect(waits[i]!).toBeLessThanOrEqual(50 * i + 1);
      expect(waits[i]!).toBeGreaterThanOrEqual(50 * i - spread - 1);
      expect(starts[i]!).toBeGreaterThanOrEqual(waits[i]! - 1);
      expect(starts[i]!).toBeGreaterThanOrEqual(starts[i - 1]!);
    }
  });

  it('rejects with AcquireTimeoutError, consuming nothing, when the wait would exceed timeoutMs', async () => {
    const limiter = createLimiter({ store: memoryStore(), policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    const t0 = performance.now();
    await limiter.take('p', 'k');
    const err = await limiter.acquire('p', 'k', { timeoutMs: 200 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AcquireTimeoutError);
    expect((err as AcquireTimeoutError).retryAfterMs).toBeGreaterThanOrEqual(1000 - (performance.now() - t0) - 1);
    const peek = await limiter.peek('p', 'k');
    expect(peek.resetAfterMs).toBeLessThanOrEqual(1000);
  });

  it('stops waiting when the signal aborts', async () => {
    const limiter = createLimiter({ store: memoryStore(), policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    await limiter.take('p', 'k');
    const ac = new AbortController();
    const t0 = performance.now();
    setTimeout(() => ac.abort(new Error('stop')), 30);
    await expect(limiter.acquire('p', 'k', { timeoutMs: 5000, signal: ac.signal })).rejects.toThrow('stop');
    expect(performance.now() - t0).toBeLessThan(200);
  });
});

describe('onDecision hook', () => {
  it('is off by default, receives one event per decision when set, and cannot break decisions', async () => {
    const events: DecisionEvent[] = [];
    const limiter = createLimiter({
      store: memoryStore(),
      policies: { p: { capacity: 1, refillPerSecond: 1 } },
      onDecision: (e) => {
        events.push(e);
        throw new Error('logger bug');
      },
    });
    await limiter.take('p', 'a');
    await limiter.take('p', 'a');
    await limiter.peek('p', 'a');
    expect(events.map((e) => [e.op, e.decision.allowed])).toEqual([
      ['take', true],
      ['take', false],
      // The bucket is empty: a take of 1 would not pass, so the peek is not "allowed".
      ['peek', false],
    ]);
    expect(events[0]).toMatchObject({ policy: 'p', key: 'a', cost: 1 });
  });
});

describe('limiter options', () => {
  it('fail at creation with the field named', () => {
    const policies = { p: { capacity: 1, refillPerSecond: 1 } };
    expect(() => createLimiter({ store: undefined as never, policies })).toThrow(ConfigError);
    expect(() => createLimiter({ store: memoryStore(), policies, timeoutMs: 0 })).toThrow(/timeoutMs/);
    expect(() => createLimiter({ store: memoryStore(), policies, onStoreError: 'open' as never })).toThrow(/onStoreError/);
  });
});

describe('memory store bounds', () => {
  it('never holds more than maxKeys, dropping full buckets before active ones', async () => {
    let now = 0;
    const store = memoryStore({ maxKeys: 100, nowMs: () => now });
    const limiter = createLimiter({ store, policies: { p: { capacity: 2, refillPerSecond: 1 } } });
    for (let i = 0; i < 100; i++) await limiter.take('p', `old${i}`);
    now += 5000; // all 100 are full again
    for (let i = 0; i < 100; i++) await limiter.take('p', `new${i}`, { cost: 2 });
    expect(store.size).toBeLessThanOrEqual(100);
    expect(store.evictedActive).toBe(0);
    for (let i = 0; i < 100; i++) expect((await limiter.take('p', `new${i}`)).allowed).toBe(false);
    for (let i = 0; i < 1000; i++) await limiter.take('p', `more${i}`, { cost: 2 });
    expect(store.size).toBeLessThanOrEqual(100);
    expect(store.evictedActive).toBeGreaterThan(0);
  });

  it('a bucket in use survives eviction (second chance) while idle active buckets go', async () => {
    const now = 0;
    const store = memoryStore({ maxKeys: 10, nowMs: () => now });
    const limiter = createLimiter({ store, policies: { p: { capacity: 100, refillPerSecond: 1e-3 } } });
    for (let i = 0; i < 50; i++) {
      await limiter.take('p', 'hot');
      await limiter.take('p', `cold${i}`); // a new active bucket each time: the store must evict
    }
    expect(store.size).toBeLessThanOrEqual(10);
    expect(store.evictedActive).toBeGreaterThanOrEqual(40);
    // Never evicted, so never refilled early: 50 taken, then this one.
    expect((await limiter.take('p', 'hot')).remaining).toBe(49);
    // The oldest idle bucket was dropped, which refilled it.
    expect((await limiter.take('p', 'cold0')).remaining).toBe(99);
  });
});
