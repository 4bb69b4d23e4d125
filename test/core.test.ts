// The pure core against an exact reference model (BigInt arithmetic), on a fake clock: no sleeping.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createLimiter, ConfigError } from '../src/index.js';
import { memoryStore } from '../src/stores/memory.js';
import { MAX_CAPACITY_UNITS, resolvePolicy } from '../src/core/policy.js';
import { step, stepArgs, toDecision } from '../src/core/gcra.js';
import { checkGrantsAgainstModel, checkMultiAgainstModel, checkTakesAgainstModel, gapUsArb, leaseOpsArb, multiLimitsArb, multiOpsArb, rateArb, takeOpsArb } from './support/exact-bucket.js';

/** A memory store on a fake clock kept in whole µs at an epoch's magnitude (as real clocks are). */
function fakeClockStore() {
  let nowUs = 1_790_000_000_000_000;
  return { store: memoryStore({ nowMs: () => nowUs / 1000 }), advance: (dtUs: number) => (nowUs += dtUs) };
}

describe('GCRA core against an exact continuous token bucket', () => {
  it('makes the same decisions, remaining, waitMs and retryAfterMs for any sequence, at every rate', async () => {
    await fc.assert(
      // refillPerSecond = p / q from 1e-6 to 1e6 per second, fractional rates such as 1/30 included; gaps
      // of whole µs, many of them 0 (a burst at one instant) or a few µs (a token each at 1e6/s).
      fc.asyncProperty(fc.integer({ min: 1, max: 50 }), rateArb, takeOpsArb(60), async (capacity, { p, q }, ops) => {
        const { store, advance } = fakeClockStore();
        await checkTakesAgainstModel(store, advance, capacity, p, q, ops);
      }),
      { numRuns: 400 },
    );
  });

  it('lease grants (partial, whole tokens) and refunds (never fuller than full) match the model, at every rate', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 50 }), rateArb, leaseOpsArb(), async (capacity, { p, q }, ops) => {
        const { store, advance } = fakeClockStore();
        await checkGrantsAgainstModel(store, 'k', advance, capacity, p, q, ops);
      }),
      { numRuns: 300 },
    );
  });

  it('several limits in one step: takes (a cost per limit), adjustments, peeks and idempotent repeats match the model, overall and per limit', async () => {
    await fc.assert(
      fc.asyncProperty(multiLimitsArb, multiOpsArb(), async (specs, ops) => {
        const { store, advance } = fakeClockStore();
        await checkMultiAgainstModel(store, advance, specs, ops);
      }),
      { numRuns: 400 },
    );
  });

  it('never admits more than capacity + rate * T in any window, at any rate', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 100 }),
        fc.oneof(fc.double({ min: 1e-3, max: 1e4, noNaN: true }), fc.double({ min: 1e4, max: 1e6, noNaN: true })),
        fc.array(gapUsArb(), { minLength: 1, maxLength: 300 }),
        async (capacity, refillPerSecond, gaps) => {
          const { store, advance } = fakeClockStore();
          const limiter = createLimiter({ store, policies: { x: { capacity, refillPerSecond } } });
          // The rate the policy enforces exactly: refillPerSecond as a ratio of integers (within 1e-9 of it).
          const rate = limiter.policy('x')!;
          const admittedAt: number[] = [];
          let t = 0;
          for (const gap of gaps) {
            advance(gap);
            t += gap;
            if ((await limiter.take('x', 'k')).allowed) admittedAt.push(t);
          }
          // Every window [admittedAt[i], admittedAt[j]] holds j - i + 1 admissions.
          for (let i = 0; i < admittedAt.length; i++) {
            for (let j = i; j < admittedAt.length; j++) {
              const spanUs = BigInt(admittedAt[j]! - admittedAt[i]!);
              // j - i + 1 <= capacity + spanUs * p / (q * 1e6), in integers.
              const lhs = BigInt(j - i + 1 - capacity) * BigInt(rate.rateDenominator) * 1_000_000n;
              expect(lhs <= spanUs * BigInt(rate.rateNumerator)).toBe(true);
            }
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it('a full bucket at one instant admits exactly its capacity at every rate, then exactly the refill of 10 ms', async () => {
    // The review's cases: a float TAT in epoch ms admitted 1025 at 1e6/s, 1024 at 2e5-5e5/s and 999 at
    // 1e4-1e5/s, and then 975 instead of 1000 in 10 ms at 1e5/s.
    for (const refillPerSecond of [1e6, 5e5, 2e5, 1e5, 5e4, 1e4, 5000, 999_999, 333_333.5]) {
      const { store, advance } = fakeClockStore();
      const limiter = createLimiter({ store, policies: { x: { capacity: 1000, refillPerSecond } } });
      let burst = 0;
      while ((await limiter.take('x', 'k')).allowed) burst++;
      expect({ refillPerSecond, burst }).toEqual({ refillPerSecond, burst: 1000 });
      advance(10_000);
      let refill = 0;
      while ((await limiter.take('x', 'k')).allowed) refill++;
      expect({ refillPerSecond, refill }).toEqual({ refillPerSecond, refill: Math.min(1000, Math.floor(refillPerSecond / 100)) });
    }
  });

  it('capacity 1 at 1e6/s: three takes at one instant admit one, and a µs later one more', async () => {
    const { store, advance } = fakeClockStore();
    const limiter = createLimiter({ store, policies: { x: { capacity: 1, refillPerSecond: 1e6 } } });
    expect(await limiter.take('x', 'k')).toMatchObject({ allowed: true, remaining: 0 });
    expect(await limiter.take('x', 'k')).toMatchObject({ allowed: false, remaining: 0, retryAfterMs: 1 });
    expect(await limiter.take('x', 'k')).toMatchObject({ allowed: false, remaining: 0 });
    advance(1);
    expect(await limiter.take('x', 'k')).toMatchObject({ allowed: true, remaining: 0 });
    expect(await limiter.take('x', 'k')).toMatchObject({ allowed: false });
  });

  it('handles the ends of the policy ranges without losing or giving a token', () => {
    for (const [capacity, refillPerSecond] of [
      // The largest bucket at the slowest rate it allows, the fastest rate, and the slowest rate.
      [1e9, 0.5],
      [1e9, 1e6],
      [2251, 1e-6],
      [1, 1e-6],
      [1, 1e6],
    ] as const) {
      const policy = resolvePolicy('x', { capacity, refillPerSecond }, { onStoreError: 'deny', timeoutMs: 1000 });
      const now = 1_790_000_000_000_000;
      let r = step(undefined, now, stepArgs(policy, capacity, 0));
      expect(r.allowed).toBe(true);
      expect(toDecision(policy, capacity, r).remaining).toBe(0);
      r = step(r.write!, now, stepArgs(policy, 1, 0));
      expect(r.allowed).toBe(false);
      expect(toDecision(policy, 1, r).retryAfterMs).toBe(Math.max(1, Math.ceil(1000 / refillPerSecond)));
      // One token's refill later (rounded up to the µs) exactly one more is admitted, and not a µs sooner.
      const tokenUs = Math.ceil(1e6 / refillPerSecond);
      const full = { debtUnits: [policy.capacityUnits], atUs: now };
      expect(step(full, now + tokenUs - 1, stepArgs(policy, 1, 0)).allowed).toBe(false);
      const next = step(full, now + tokenUs, stepArgs(policy, 1, 0));
      expect(next.allowed).toBe(true);
      expect(step(next.write!, now + tokenUs, stepArgs(policy, 1, 0)).allowed).toBe(false);
    }
  });

  it('a denied step changes nothing and a peek never writes', () => {
    const policy = resolvePolicy('x', { capacity: 2, refillPerSecond: 1 }, { onStoreError: 'deny', timeoutMs: 1000 });
    const a = step(undefined, 0, stepArgs(policy, 2, 0));
    expect(a.write).toEqual({ debtUnits: [2 * policy.tokenUnits], atUs: 0 });
    const b = step(a.write!, 10_000, stepArgs(policy, 1, 0));
    expect(b).toEqual({ allowed: false, debtUnits: [2 * policy.tokenUnits - 10_000 * policy.refillUnitsPerUs], atUs: 10_000 });
    const c = step(a.write!, 10_000, stepArgs(policy, 0, 0));
    expect(c).toEqual({ allowed: true, debtUnits: [2 * policy.tokenUnits - 10_000 * policy.refillUnitsPerUs], atUs: 10_000 });
  });

  it('keeps rates as exact ratios of integers', () => {
    const at = (refillPerSecond: number, capacity = 10) => resolvePolicy('x', { capacity, refillPerSecond }, { onStoreError: 'deny', timeoutMs: 1000 });
    expect(at(1000 / 86400)).toMatchObject({ rateNumerator: 5, rateDenominator: 432 });
    expect(at(0.1)).toMatchObject({ rateNumerator: 1, rateDenominator: 10, tokenUnits: 10_000_000, refillUnitsPerUs: 1 });
    expect(at(1 / 3)).toMatchObject({ rateNumerator: 1, rateDenominator: 3, tokenUnits: 3_000_000, refillUnitsPerUs: 1 });
    expect(at(1e6)).toMatchObject({ tokenUnits: 1, refillUnitsPerUs: 1 });
    expect(at(999_999)).toMatchObject({ tokenUnits: 1_000_000, refillUnitsPerUs: 999_999 });
    // No small ratio is exactly pi: the nearest one that fits is within 1e-9 of it.
    const pi = at(Math.PI, 1000);
    expect(Math.abs(pi.refillPerSecond - Math.PI)).toBeLessThanOrEqual(Math.PI * 1e-9);
    expect(pi.capacityUnits).toBeLessThanOrEqual(2 ** 51);
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
    // No URL path can name "." or "..": a client resolves them away (/v1/limits/./k is /v1/limits/k).
    for (const name of ['.', '..']) {
      expect(() => createLimiter({ store: memoryStore(), policies: { [name]: { capacity: 1, refillPerSecond: 1 } } })).toThrow(`policies[${JSON.stringify(name)}] name must match /^[A-Za-z0-9_.-]{1,64}$/, not "." or ".."`);
    }
    // Dots elsewhere, and every character the pattern names, still pass; \w is no wider than it says.
    for (const name of ['...', '.a', 'a.', 'v1.search', 'A-z_09']) expect(() => createLimiter({ store: memoryStore(), policies: { [name]: { capacity: 1, refillPerSecond: 1 } } })).not.toThrow();
    for (const name of ['é', 'a b', 'ａ', 'x'.repeat(65), '']) expect(() => createLimiter({ store: memoryStore(), policies: { [name]: { capacity: 1, refillPerSecond: 1 } } })).toThrow(/name must match/);
  });
  it('accepts the boundaries', () => {
    expect(() =>
      createLimiter({
        store: memoryStore(),
        policies: { a: { capacity: 1, refillPerSecond: 1e-6 }, b: { capacity: 1e9, refillPerSecond: 1e6 }, c: { capacity: 1e9, refillPerSecond: 0.5 }, d: { capacity: 2251, refillPerSecond: 1e-6 } },
      }),
    ).not.toThrow();
  });

  it('caps a bucket at 2^51 units (about 71 years to refill at rates that divide 1e6/s), naming the field and the limit', () => {
    expect(MAX_CAPACITY_UNITS).toBe(2 ** 51);
    const make = (capacity: number, refillPerSecond: number) => () => resolvePolicy('big', { capacity, refillPerSecond }, { onStoreError: 'deny', timeoutMs: 1000 });
    expect(make(1e9, 0.5)).not.toThrow();
    for (const [capacity, refill] of [
      [1e9, 1e-6],
      [1e9, 1e-3],
      [1e9, 0.4],
      [2252, 1e-6],
    ] as const) {
      let err: unknown;
      try {
        make(capacity, refill)();
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).field).toBe('policies.big.refillPerSecond');
      expect((err as Error).message).toMatch(/capacity \/ refillPerSecond must be at most 2251799813 s/);
    }
    // At the cap every number a decision carries is a safe integer in ms, and at most 15 digits in seconds.
    const policy = make(2251, 1e-6)();
    const d = toDecision(policy, 1, { allowed: false, debtUnits: [policy.capacityUnits] });
    for (const ms of [d.retryAfterMs, d.resetAfterMs!, policy.burstMs + 300_000]) expect(Number.isSafeInteger(ms)).toBe(true);
    expect(String(policy.windowSeconds).length).toBeLessThanOrEqual(15);
  });
});
