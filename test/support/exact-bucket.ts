import fc from 'fast-check';
import { expect } from 'vitest';
import { grantArgs, refundArgs, stepArgs, toDecision } from '../../src/core/gcra.js';
import { resolvePolicy } from '../../src/core/policy.js';
import type { Store } from '../../src/store.js';
import { createLimiter } from '../../src/limiter.js';
// The exact reference model every store is checked against: a continuous token bucket in BigInt units,
// on a clock of whole µs (the resolution of every store's clock). It shares no code with src/: its
// units are its own (one token = 1e6 * q units, p units per µs for a rate of p / q tokens per second).

const ceilDiv = (a: bigint, b: bigint) => (a <= 0n ? 0n : (a + b - 1n) / b);

/** A continuous token bucket in exact integer units: one token = 1e6*q units, p units refill per µs. */
export class ExactBucket {
  units: bigint;
  last = 0n;
  constructor(
    readonly capacity: number,
    readonly p: bigint,
    readonly q: bigint,
  ) {
    this.units = BigInt(capacity) * this.token;
  }
  get token(): bigint {
    return 1_000_000n * this.q;
  }
  private advance(tUs: number) {
    const cap = BigInt(this.capacity) * this.token;
    this.units += (BigInt(tUs) - this.last) * this.p;
    if (this.units > cap) this.units = cap;
    this.last = BigInt(tUs);
  }
  private whole(): number {
    return Number(this.units > 0n ? this.units / this.token : 0n);
  }
  /** A lease grant: the whole tokens that exist now, at most n of them, taken. */
  grant(tUs: number, n: number) {
    this.advance(tUs);
    const have = this.units > 0n ? this.units / this.token : 0n;
    const k = have < BigInt(n) ? have : BigInt(n);
    this.units -= k * this.token;
    return { tokens: Number(k), remaining: this.whole() };
  }
  /**
   * A refund of n tokens: never fuller than full. With sinceUs (when they were granted), only what the
   * bucket has not refilled since goes back: max(0, n tokens - (tUs - sinceUs) of refill).
   */
  refund(tUs: number, n: number, sinceUs?: number) {
    this.advance(tUs);
    const cap = BigInt(this.capacity) * this.token;
    let back = BigInt(n) * this.token;
    if (sinceUs !== undefined) back -= BigInt(Math.max(0, tUs - sinceUs)) * this.p;
    if (back > 0n) this.units += back;
    if (this.units > cap) this.units = cap;
    return { remaining: this.whole() };
  }
  /** A take of `cost` tokens that may wait up to maxWaitMs; times out in ms, rounded up. */
  take(tUs: number, cost: number, maxWaitMs: number) {
    this.advance(tUs);
    const costU = BigInt(cost) * this.token;
    const perMs = 1000n * this.p;
    if (this.units + BigInt(maxWaitMs) * perMs >= costU) {
      this.units -= costU;
      return { allowed: true, remaining: this.whole(), waitMs: Number(ceilDiv(-this.units, perMs)), retryAfterMs: 0 };
    }
    return { allowed: false, remaining: this.whole(), waitMs: 0, retryAfterMs: Number(ceilDiv(costU - this.units, perMs)) };
  }
}

/** Rates p / q per second across the whole allowed range, fractional ones and the fastest included. */
export const rateArb = fc.oneof(
  fc.record({ p: fc.integer({ min: 1, max: 500 }), q: fc.constantFrom(1, 2, 3, 7, 30, 1000) }),
  // 1e4 to 1e6 per second: a token every µs at the top, where a float TAT loses tokens.
  fc.record({ p: fc.integer({ min: 10_000, max: 1_000_000 }), q: fc.constantFrom(1, 1, 3, 7) }),
  fc.record({ p: fc.constantFrom(1_000_000, 999_999, 500_000, 200_000, 100_000, 1, 5), q: fc.constantFrom(1, 1_000_000, 432, 86_400) }),
);

/**
 * Gaps between steps, in µs, in whole multiples of `resolutionUs` (the store clock's resolution: 1 µs for
 * Redis and memory, 1000 for MongoDB's $$NOW and the Durable Object's Date.now()): often none (a burst at
 * one instant), often a few µs (a token or a few at the fastest rates), sometimes seconds.
 */
export function gapUsArb(resolutionUs = 1) {
  return fc
    .oneof(
      { weight: 3, arbitrary: fc.constant(0) },
      { weight: 2, arbitrary: fc.integer({ min: 1, max: 50 }) },
      { weight: 2, arbitrary: fc.integer({ min: 1, max: 5000 }) },
      { weight: 2, arbitrary: fc.integer({ min: 0, max: 3000 }).map((ms) => ms * 1000) },
    )
    .map((us) => Math.ceil(us / resolutionUs) * resolutionUs);
}

/** Takes at fake-clock offsets: dtUs since the previous one, cost and maxWaitMs (a reservation). */
export const takeOpsArb = (maxLength: number, resolutionUs = 1) =>
  fc.array(fc.record({ dtUs: gapUsArb(resolutionUs), cost: fc.integer({ min: 1, max: 50 }), maxWaitMs: fc.constantFrom(0, 0, 0, 10, 250, 5000) }), {
    minLength: 1,
    maxLength,
  });
export type TakeOp = { dtUs: number; cost: number; maxWaitMs: number };

/**
 * Runs takes through a limiter on `store` and the model side by side: the same verdict, remaining,
 * waitMs and retryAfterMs after each. `advance` moves the store's clock by dtUs.
 */
export async function checkTakesAgainstModel(store: Store, advance: (dtUs: number) => void, capacity: number, p: number, q: number, ops: TakeOp[]): Promise<void> {
  const limiter = createLimiter({ store, policies: { x: { capacity, refillPerSecond: p / q } } });
  const model = new ExactBucket(capacity, BigInt(p), BigInt(q));
  let t = 0;
  for (const op of ops) {
    t += op.dtUs;
    advance(op.dtUs);
    const cost = Math.min(op.cost, capacity);
    const want = model.take(t, cost, op.maxWaitMs);
    const got = await limiter.take('x', 'k', { cost, maxWaitMs: op.maxWaitMs });
    expect({ t, cost, maxWaitMs: op.maxWaitMs, allowed: got.allowed, remaining: got.remaining, waitMs: got.waitMs, retryAfterMs: got.retryAfterMs }).toEqual({
      t,
      cost,
      maxWaitMs: op.maxWaitMs,
      ...want,
    });
  }
}

/** Store-level ops for lease grants and refunds, mixed with plain takes. */
export const leaseOpsArb = (resolutionUs = 1) =>
  fc.array(
    fc.record({
      dtUs: gapUsArb(resolutionUs),
      kind: fc.constantFrom('take', 'grant', 'grant', 'refund', 'refund-since'),
      n: fc.integer({ min: 1, max: 50 }),
      // refund-since: the grant being given back was taken this long before the previous step.
      backUs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2_000 }), fc.integer({ min: 0, max: 5_000_000 })),
    }),
    { minLength: 1, maxLength: 40 },
  );
export type LeaseOp = { dtUs: number; kind: string; n: number; backUs?: number };

/**
 * Runs grants (partial, StepArgs.tokenUnits), refunds (negative costUnits; `refund-since` decayed by the
 * store from a reading of its own clock, StepArgs.refundSinceUs) and takes straight against a store and
 * the model: the same tokens granted, the same verdicts, the same remaining tokens after each step, and
 * each step's clock reading (StepResult.atUs) where the store reports it. `advance` moves the store's
 * clock by dtUs.
 */
export async function checkGrantsAgainstModel(store: Store, key: string, advance: (dtUs: number) => void, capacity: number, p: number, q: number, ops: LeaseOp[]): Promise<void> {
  const policy = resolvePolicy('x', { capacity, refillPerSecond: p / q }, { onStoreError: 'deny', timeoutMs: 1000 });
  const model = new ExactBucket(capacity, BigInt(p), BigInt(q));
  let t = 0;
  // The store clock's reading at the previous step, and the model's time then.
  let last: { atUs: number; t: number } | undefined;
  const note = (r: { atUs?: number }) => {
    expect(r.atUs, 'a built-in store reports its clock reading').toBeTypeOf('number');
    if (last) expect(r.atUs! - last.atUs).toBe(t - last.t);
    last = { atUs: r.atUs!, t };
  };
  for (const op of ops) {
    t += op.dtUs;
    advance(op.dtUs);
    const n = Math.min(op.n, capacity);
    if (op.kind === 'take') {
      const want = model.take(t, n, 0);
      const r = await store.step(key, stepArgs(policy, n, 0));
      note(r);
      const got = toDecision(policy, n, r);
      expect({ t, op: op.kind, allowed: got.allowed, remaining: got.remaining }).toEqual({ t, op: op.kind, allowed: want.allowed, remaining: want.remaining });
    } else if (op.kind === 'grant') {
      const want = model.grant(t, n);
      const r = await store.step(key, grantArgs(policy, n));
      note(r);
      expect(r.allowed).toBe((r.tokens ?? 0) > 0);
      const got = { tokens: r.tokens, remaining: toDecision(policy, 1, { allowed: true, debtUnits: r.debtUnits }).remaining };
      expect({ t, op: op.kind, ...got }).toEqual({ t, op: op.kind, ...want });
    } else {
      const back = op.kind === 'refund-since' && last ? Math.min(op.backUs ?? 0, last.atUs) : undefined;
      const want = back === undefined ? model.refund(t, n) : model.refund(t, n, last!.t - back);
      const r = await store.step(key, refundArgs(policy, n * policy.tokenUnits, back === undefined ? undefined : last!.atUs - back));
      note(r);
      expect(r.allowed).toBe(true);
      expect({ t, op: op.kind, remaining: toDecision(policy, 1, r).remaining }).toEqual({ t, op: op.kind, ...want });
    }
  }
}
