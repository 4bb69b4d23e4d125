import fc from 'fast-check';
import { expect } from 'vitest';
import { stepArgs, toDecision } from '../../src/core/gcra.js';
import { resolvePolicy } from '../../src/core/policy.js';
import type { Store } from '../../src/store.js';
import { createLimiter } from '../../src/limiter.js';
// The exact reference model every store is checked against: a continuous token bucket in BigInt units.

/** A continuous token bucket in exact integer units: one token = 1000*q units, p units refill per ms. */
export class ExactBucket {
  units: bigint;
  last = 0n;
  constructor(
    readonly capacity: number,
    readonly p: bigint,
    readonly q: bigint,
  ) {
    this.units = BigInt(capacity) * 1000n * q;
  }
  private advance(t: bigint) {
    const cap = BigInt(this.capacity) * 1000n * this.q;
    this.units += (t - this.last) * this.p;
    if (this.units > cap) this.units = cap;
    this.last = t;
  }
  /** A lease grant: the whole tokens that exist now, at most n of them, taken. */
  grant(t: number, n: number) {
    this.advance(BigInt(t));
    const token = 1000n * this.q;
    const have = this.units > 0n ? this.units / token : 0n;
    const k = have < BigInt(n) ? have : BigInt(n);
    this.units -= k * token;
    return { units: Number(k), remaining: Number(this.units > 0n ? this.units / token : 0n) };
  }
  /** A refund of n tokens: never fuller than full. */
  refund(t: number, n: number) {
    this.advance(BigInt(t));
    const cap = BigInt(this.capacity) * 1000n * this.q;
    this.units += BigInt(n) * 1000n * this.q;
    if (this.units > cap) this.units = cap;
    return { remaining: Number(this.units > 0n ? this.units / (1000n * this.q) : 0n) };
  }
  take(t: number, cost: number, maxWaitMs: number) {
    this.advance(BigInt(t));
    const costU = BigInt(cost) * 1000n * this.q;
    const ceilDiv = (a: bigint, b: bigint) => (a <= 0n ? 0n : (a + b - 1n) / b);
    if (this.units + BigInt(maxWaitMs) * this.p >= costU) {
      this.units -= costU;
      const remaining = this.units > 0n ? this.units / (1000n * this.q) : 0n;
      return { allowed: true, remaining: Number(remaining), waitMs: Number(ceilDiv(-this.units, this.p)), retryAfterMs: 0 };
    }
    const remaining = this.units > 0n ? this.units / (1000n * this.q) : 0n;
    return { allowed: false, remaining: Number(remaining), waitMs: 0, retryAfterMs: Number(ceilDiv(costU - this.units, this.p)) };
  }
}

/** Takes at fake-clock offsets: dtMs since the previous one, cost and maxWaitMs (a reservation). */
export const takeOpsArb = (maxLength: number) =>
  fc.array(fc.record({ dtMs: fc.integer({ min: 0, max: 3000 }), cost: fc.integer({ min: 1, max: 50 }), maxWaitMs: fc.constantFrom(0, 0, 0, 10, 250, 5000) }), {
    minLength: 1,
    maxLength,
  });
export type TakeOp = { dtMs: number; cost: number; maxWaitMs: number };

/**
 * Runs takes through a limiter on `store` and the model side by side: the same verdict, remaining,
 * waitMs and retryAfterMs after each. `advance` moves the store's clock by dtMs.
 */
export async function checkTakesAgainstModel(store: Store, advance: (dtMs: number) => void, capacity: number, p: number, q: number, ops: TakeOp[]): Promise<void> {
  const limiter = createLimiter({ store, policies: { x: { capacity, refillPerSecond: p / q } } });
  const model = new ExactBucket(capacity, BigInt(p), BigInt(q));
  let t = 0;
  for (const op of ops) {
    t += op.dtMs;
    advance(op.dtMs);
    const cost = Math.min(op.cost, capacity);
    const want = model.take(t, cost, op.maxWaitMs);
    const got = await limiter.take('x', 'k', { cost, maxWaitMs: op.maxWaitMs });
    expect({ allowed: got.allowed, remaining: got.remaining, waitMs: got.waitMs, retryAfterMs: got.retryAfterMs }).toEqual(want);
  }
}

/** Store-level ops for lease grants and refunds, mixed with plain takes. */
export const leaseOpsArb = fc.array(
  fc.record({ dtMs: fc.integer({ min: 0, max: 3000 }), kind: fc.constantFrom('take', 'grant', 'grant', 'refund'), n: fc.integer({ min: 1, max: 50 }) }),
  { minLength: 1, maxLength: 40 },
);
export type LeaseOp = { dtMs: number; kind: string; n: number };

/**
 * Runs grants (partial, StepArgs.unitMs), refunds (negative costMs) and takes straight against a store and
 * the model: the same units granted, the same verdicts, the same remaining tokens after each step.
 * `advance` moves the store's clock by dtMs.
 */
export async function checkGrantsAgainstModel(store: Store, key: string, advance: (dtMs: number) => void, capacity: number, p: number, q: number, ops: LeaseOp[]): Promise<void> {
  const policy = resolvePolicy('x', { capacity, refillPerSecond: p / q }, { onStoreError: 'deny', timeoutMs: 1000 });
  const model = new ExactBucket(capacity, BigInt(p), BigInt(q));
  let t = 0;
  for (const op of ops) {
    t += op.dtMs;
    advance(op.dtMs);
    const n = Math.min(op.n, capacity);
    if (op.kind === 'take') {
      const want = model.take(t, n, 0);
      const got = toDecision(policy, n, await store.step(key, stepArgs(policy, n, 0)));
      expect({ op: op.kind, allowed: got.allowed, remaining: got.remaining }).toEqual({ op: op.kind, allowed: want.allowed, remaining: want.remaining });
    } else if (op.kind === 'grant') {
      const want = model.grant(t, n);
      const r = await store.step(key, { ...stepArgs(policy, n, 0), unitMs: policy.intervalMs });
      expect(r.allowed).toBe((r.units ?? 0) > 0);
      const got = { units: r.units, remaining: toDecision(policy, 1, { allowed: true, debtMs: r.debtMs }).remaining };
      expect({ op: op.kind, ...got }).toEqual({ op: op.kind, ...want });
    } else {
      const want = model.refund(t, n);
      const r = await store.step(key, { costMs: -n * policy.intervalMs, limitMs: stepArgs(policy, 1, 0).limitMs });
      expect(r.allowed).toBe(true);
      expect({ op: op.kind, remaining: toDecision(policy, 1, r).remaining }).toEqual({ op: op.kind, ...want });
    }
  }
}
