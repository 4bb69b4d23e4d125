// The pure core against an exact reference model (BigInt arithmetic), on a fake clock: no sleeping.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createLimiter, ConfigError } from '../src/index.js';
import { memoryStore } from '../src/stores/memory.js';
import { MAX_BURST_MS, resolvePolicy } from '../src/core/policy.js';
import { step, stepArgs, toDecision } from '../src/core/gcra.js';
import { checkGrantsAgainstModel, checkTakesAgainstModel, leaseOpsArb, takeOpsArb } from './support/exact-bucket.js';

describe('GCRA core against an exact continuous token bucket', () => {
  it('makes the same decisions, remaining, waitMs and retryAfterMs for any sequence', async () => {
    await fc.assert(
      // refillPerSecond = p / q with p up to 500: fractional rates such as 1/30 included. The clock is at a
      // realistic epoch-ms magnitude, so float rounding is exercised.
      fc.asyncProperty(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 1, max: 500 }), fc.constantFrom(1, 2, 3, 7, 30, 1000), takeOpsArb(60), async (capacity, p, q, ops) => {
        let now = 1_790_000_000_000;
        await checkTakesAgainstModel(memoryStore({ nowMs: () => now }), (dt) => (now += dt), capacity, p, q, ops);
      }),
      { numRuns: 300 },
    );
  });

  it('lease grants (partial, whole tokens) and refunds (never fuller than full) match the model', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 1, max: 500 }), fc.constantFrom(1, 2, 3, 7, 30, 1000), leaseOpsArb, async (capacity, p, q, ops) => {
        let now = 1_790_000_000_000;
        await checkGrantsAgainstModel(memoryStore({ nowMs: () => now }), 'k', (dt) => (now += dt), capacity, p, q, ops);
      }),
      { numRuns: 300 },
    );
  });

  it('never admits more than capacity + rate * T over any span from a full bucket', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 100 }),
        fc.double({ min: 1e-3, max: 1e4, noNaN: true }),
        fc.array(fc.integer({ min: 0, max: 50 }), { minLength: 1, maxLength: 300 }),
        async (capacity, refillPerSecond, gaps) => {
          let now = 1_790_000_000_000.123;
          const limiter = createLimiter({ store: memoryStore({ nowMs: () => now }), policies: { x: { capacity, refillPerSecond } } });
          let admitted = 0;
          let elapsed = 0;
          for (const gap of gaps) {
            now += gap;
            elapsed += gap;
            if ((await limiter.take('x', 'k')).allowed) admitted++;
            // 1 µs of slack is the clock resolution the limiter allows itself.
            expect(admitted).toBeLessThanOrEqual(capacity + (refillPerSecond * (elapsed + 0.001)) / 1000 + 1e-9);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it('handles the extremes of the policy ranges without losing whole tokens', () => {
    for (const [capacity, refillPerSecond] of [
      // The slowest refill for the largest bucket: exactly MAX_BURST_MS to refill.
      [1e9, 1e-3],
      [1e9, 1e6],
      [1, 1e-6],
      [1, 1e6],
    ] as const) {
      const policy = resolvePolicy('x', { capacity, refillPerSecond }, { onStoreError: 'deny', timeoutMs: 1000 });
      const now = 1_790_000_000_000;
      let r = step(undefined, now, stepArgs(policy, capacity, 0));
      expect(r.allowed).toBe(true);
      expect(toDecision(policy, capacity, r).remaining).toBe(0);
      r = step(r.tatMs, now, stepArgs(policy, 1, 0));
      if (policy.intervalMs <= policy.slackMs) {
        // 1e6 tokens/s is one token per µs, the store clock's resolution: the 1 µs slack admits one more.
        expect(r.allowed).toBe(true);
        r = step(r.tatMs, now, stepArgs(policy, 1, 0));
      }
      expect(r.allowed).toBe(false);
      const d = toDecision(policy, 1, r);
      // Exact to the ms, less the float slack that only the largest bursts have (see ResolvedPolicy.slackMs).
      const exact = Math.max(1, Math.ceil(1000 / refillPerSecond));
      expect(Math.abs(d.retryAfterMs - exact)).toBeLessThanOrEqual(Math.ceil(policy.slackMs));
      if (policy.burstMs < 1e12) expect(d.retryAfterMs).toBe(exact);
    }
  });

  it('a denied step changes nothing and a peek never writes', () => {
    const policy = resolvePolicy('x', { capacity: 2, refillPerSecond: 1 }, { onStoreError: 'deny', timeoutMs: 1000 });
    const a = step(undefined, 0, stepArgs(policy, 2, 0));
    const b = step(a.tatMs, 10, stepArgs(policy, 1, 0));
    expect(b).toMatchObject({ allowed: false, tatMs: a.tatMs, debtMs: 1990 });
    const c = step(a.tatMs, 10, { costMs: 0, limitMs: 0 });
    expect(c).toMatchObject({ allowed: true, tatMs: a.tatMs, debtMs: 1990 });
  });
});

describe('policy validation names the field and the value', () => {
  const cases: [unknown, RegExp][] = [
    [{ capacity: 0, refillPerSecond: 1 }, /policies\.p\.capacity .*got 0/],
    [{ capacity: 1.5, refillPerSecond: 1 }, /policies\.p\.capacity .*got 1\.5/],
    [{ capacity: 1e9 + 1, refillPerSecond: 1 }, /policies\.p\.capacity/],
    [{ capacity: '10', refillPerSecond: 1 }, /policies\.p\.capacity .*got "10"/],
    [{ capacity: 10, refillPerSecond: 0 }, /policies\.p\.refillPerSecond .*got 0/],
    [{ capacity: 10, refillPerSecond: Infinity }, /policies\.p\.refillPerSecond .*got Infinity/],
    [{ capacity: 10, refillPerSecond: Number.NaN }, /policies\.p\.refillPerSecond .*got NaN/],
    [{ capacity: 10, refillPerSecond: 2e6 }, /policies\.p\.refillPerSecond/],
    [{ capacity: 10, refillPerSecond: 1e-7 }, /policies\.p\.refillPerSecond/],
    [{ capacity: 10, refillPerSecond: 1, onStoreError: 'maybe' }, /policies\.p\.onStoreError .*"maybe"/],
    [{ capacity: 10, refillPerSecond: 1, shadow: 'yes' }, /policies\.p\.shadow/],
    [{ capacity: 10, refillPerSecond: 1, timeoutMs: 0 }, /policies\.p\.timeoutMs/],
    [{ capacity: 10, refillPerSecond: 1, burst: 3 }, /policies\.p\.burst is not a known field/],
    [null, /policies\.p must be an object/],
  ];
  for (const [config, message] of cases) {
    it(`rejects ${JSON.stringify(config)}`, () => {
      let err: unknown;
      try {
        createLimiter({ store: memoryStore(), policies: { p: config as never } });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as Error).message).toMatch(message);
    });
  }
  it('rejects policy names that would break keys or headers', () => {
    expect(() => createLimiter({ store: memoryStore(), policies: { 'a:b': { capacity: 1, refillPerSecond: 1 } } })).toThrow(/name must match/);
    expect(() => createLimiter({ store: memoryStore(), policies: { 'a"b': { capacity: 1, refillPerSecond: 1 } } })).toThrow(ConfigError);
    expect(() => createLimiter({ store: memoryStore(), policies: {} })).toThrow(/at least one policy/);
  });
  it('accepts the boundaries', () => {
    expect(() =>
      createLimiter({
        store: memoryStore(),
        policies: { a: { capacity: 1, refillPerSecond: 1e-6 }, b: { capacity: 1e9, refillPerSecond: 1e6 }, c: { capacity: 1e9, refillPerSecond: 1e-3 } },
      }),
    ).not.toThrow();
  });

  it('caps the time to refill an empty bucket at MAX_BURST_MS, naming the field and the limit', () => {
    expect(MAX_BURST_MS).toBe(1e15);
    const make = (capacity: number, refillPerSecond: number) => () => resolvePolicy('big', { capacity, refillPerSecond }, { onStoreError: 'deny', timeoutMs: 1000 });
    expect(make(1e9, 1e-3)).not.toThrow();
    for (const [capacity, refill] of [
      [1e9, 1e-6],
      [1e9, 9.99e-4],
      [1e7, 1e-6],
    ] as const) {
      let err: unknown;
      try {
        make(capacity, refill)();
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).field).toBe('policies.big.refillPerSecond');
      expect((err as Error).message).toMatch(/capacity \/ refillPerSecond <= 1000000000000 s/);
    }
    // At the cap every number a decision carries is a safe integer in ms, and at most 15 digits in seconds.
    const policy = make(1e9, 1e-3)();
    const d = toDecision(policy, 1, { allowed: false, debtMs: policy.burstMs });
    for (const ms of [d.retryAfterMs, d.resetAfterMs!, policy.burstMs + 300_000]) expect(Number.isSafeInteger(ms)).toBe(true);
    expect(String(policy.windowSeconds).length).toBeLessThanOrEqual(15);
  });
});
