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
  /**
   * When the bucket's last reservation is due (µs; 0n: none). Until then a refund gives back only what
   * the reservations do not hold: the bucket is no fuller than the refill until then short of empty.
   */
  heldUntil = 0n;
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
    if (back > 0n) this.giveBack(tUs, back);
    if (this.units > cap) this.units = cap;
    return { remaining: this.whole() };
  }
  /** Adds `back` units, but no fuller than a pending reservation allows (heldUntil), or one whose caller may still come. */
  protected giveBack(tUs: number, back: bigint): void {
    const before = this.units;
    this.units += back;
    const t = BigInt(tUs);
    // (Until the last reservation's caller has come: 1 ms after it is due, as it is told whole ms.)
    if (this.heldUntil > 0n && this.heldUntil > t - 1000n) {
      const most = -(this.heldUntil - t) * this.p;
      const limit = before > most ? before : most;
      if (this.units > limit) this.units = limit;
    }
  }
  /** A take of `cost` tokens that may wait up to maxWaitMs; times out in ms, rounded up. */
  take(tUs: number, cost: number, maxWaitMs: number) {
    this.advance(tUs);
    const costU = BigInt(cost) * this.token;
    const perMs = 1000n * this.p;
    if (this.units + BigInt(maxWaitMs) * perMs >= costU) {
      this.units -= costU;
      if (this.units < 0n) {
        const due = BigInt(tUs) + ceilDiv(-this.units, this.p);
        if (due > this.heldUntil) this.heldUntil = due;
      }
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

const max = (a: bigint, b: bigint) => (a > b ? a : b);

/** One limit of the multi-limit model: an ExactBucket with the steps split so all limits decide together. */
class ModelLimit extends ExactBucket {
  private get perMs(): bigint {
    return 1000n * this.p;
  }
  private get cap(): bigint {
    return BigInt(this.capacity) * this.token;
  }
  /** Advances to tUs; whether `cost` tokens fit within a wait of maxWaitMs (a cost of 0 always does). */
  fits(tUs: number, cost: number, maxWaitMs: number): boolean {
    this.refund(tUs, 0);
    return cost === 0 || this.units + BigInt(maxWaitMs) * this.perMs >= BigInt(cost) * this.token;
  }
  charge(cost: number): void {
    this.units -= BigInt(cost) * this.token;
  }
  /** A charge of `cost` counted as a take dueUs from now: at most the bucket less dueUs of refill and the cost. */
  chargeUntil(dueUs: bigint, cost: number): void {
    const atDue = BigInt(this.capacity) * this.token - dueUs * this.p - BigInt(cost) * this.token;
    if (atDue < this.units) this.units = atDue;
  }
  /** An adjustment: a refund never above full, a charge never below one hour of refill beyond empty. */
  adjustBy(tUs: number, cost: number): void {
    this.refund(tUs, 0);
    if (cost < 0) {
      this.giveBack(tUs, -BigInt(cost) * this.token);
      if (this.units > this.cap) this.units = this.cap;
    } else if (cost > 0) {
      const floor = -3_600_000n * this.perMs;
      const after = this.units - BigInt(cost) * this.token;
      this.units = after < floor ? (this.units < floor ? this.units : floor) : after;
    }
  }
  /** This limit's numbers in a decision of `cost` that was (or was not) allowed. */
  numbers(cost: number, allowed: boolean) {
    const debt = this.cap - this.units;
    const short = BigInt(cost) * this.token - this.units;
    return {
      remaining: Number(this.units > 0n ? this.units / this.token : 0n),
      resetAfterMs: Number(ceilDiv(debt, this.perMs)),
      retryAfterMs: allowed || cost === 0 || short <= 0n ? 0 : Math.max(1, Number(ceilDiv(short, this.perMs))),
      waitMs: allowed && cost > 0 && this.units < 0n ? Number(ceilDiv(-this.units, this.perMs)) : 0,
    };
  }
}

export interface ModelLimitSpec {
  capacity: number;
  p: number;
  q: number;
}

/** Several limits decided together: a take is allowed only when every limit fits its cost, then all pay. */
export class MultiBucket {
  readonly limits: ModelLimit[];
  constructor(specs: ModelLimitSpec[]) {
    this.limits = specs.map((s) => new ModelLimit(s.capacity, BigInt(s.p), BigInt(s.q)));
  }
  take(tUs: number, costs: number[], maxWaitMs: number) {
    const fits = this.limits.map((l, i) => l.fits(tUs, costs[i]!, maxWaitMs));
    const allowed = fits.every(Boolean);
    if (allowed) {
      this.limits.forEach((l, i) => l.charge(costs[i]!));
      // A reservation comes when its slowest limit allows (dueUs, µs rounded up): every limit it charges
      // counts it then, as a take at that time (its debt at least the refill until then, plus the cost).
      const dueUs = this.limits.reduce((m, l, i) => (costs[i]! > 0 && l.units < 0n ? max(m, ceilDiv(-l.units, l.p)) : m), 0n);
      if (dueUs > 0n) this.limits.forEach((l, i) => costs[i]! > 0 && l.chargeUntil(dueUs, costs[i]!));
      // The bucket's reservations are held until the last is due, on every limit (see giveBack).
      if (dueUs > 0n) this.limits.forEach((l) => (l.heldUntil = max(l.heldUntil, BigInt(tUs) + dueUs)));
    }
    return this.decision(costs, allowed);
  }
  adjust(tUs: number, costs: number[]) {
    this.limits.forEach((l, i) => l.adjustBy(tUs, costs[i]!));
    // As peek reads it: would a take of 1 on every limit pass now?
    return this.peek(tUs);
  }
  peek(tUs: number) {
    const ones = this.limits.map(() => 1);
    // Every limit advances to tUs (no short-circuit), then all must fit.
    const allowed = this.limits.map((l) => l.fits(tUs, 1, 0)).every(Boolean);
    return this.decision(ones, allowed);
  }
  /** The public numbers: the most constraining limit's (refused: the one that admits last; allowed: the fewest left). */
  private decision(costs: number[], allowed: boolean) {
    const limits = this.limits.map((l, i) => l.numbers(costs[i]!, allowed));
    let b = 0;
    limits.forEach((d, i) => {
      const cur = limits[b]!;
      const tighter = allowed ? d.remaining < cur.remaining || (d.remaining === cur.remaining && d.resetAfterMs > cur.resetAfterMs) : d.retryAfterMs > cur.retryAfterMs;
      if (tighter) b = i;
    });
    const bound = limits[b]!;
    return {
      allowed,
      limit: this.limits[b]!.capacity,
      remaining: bound.remaining,
      resetAfterMs: bound.resetAfterMs,
      retryAfterMs: allowed ? 0 : Math.max(1, bound.retryAfterMs),
      waitMs: allowed ? Math.max(...limits.map((d) => d.waitMs)) : 0,
      limits,
    };
  }
}

/** Two or three limits with their own capacities and rates across the allowed range. */
export const multiLimitsArb = fc.array(fc.record({ capacity: fc.integer({ min: 1, max: 60 }), rate: rateArb }), { minLength: 2, maxLength: 3 }).map((ls) =>
  ls.map((l) => ({ capacity: l.capacity, p: l.rate.p, q: l.rate.q })),
);

/** Takes (a cost per limit, some 0), adjustments (refunds and charges) and peeks, at fake-clock offsets. */
export const multiOpsArb = (resolutionUs = 1) =>
  fc.array(
    fc.record({
      dtUs: gapUsArb(resolutionUs),
      kind: fc.constantFrom('take', 'take', 'take', 'take-all', 'adjust', 'peek'),
      costs: fc.array(fc.integer({ min: 0, max: 60 }), { minLength: 3, maxLength: 3 }),
      adjust: fc.array(fc.integer({ min: -80, max: 80 }), { minLength: 3, maxLength: 3 }),
      maxWaitMs: fc.constantFrom(0, 0, 0, 10, 250, 5000),
      // An idempotency key: often none, else one of a few, so that repeats (and reuses for another
      // request) happen.
      id: fc.option(fc.constantFrom('i1', 'i2', 'i3'), { freq: 2, nil: undefined }),
    }),
    { minLength: 1, maxLength: 30 },
  );
export type MultiOp = { dtUs: number; kind: string; costs: number[]; adjust: number[]; maxWaitMs: number; id?: string | undefined };

/**
 * Runs multi-limit takes (a cost per limit, or one number for all), adjustments and peeks through a
 * limiter on `store` and the model side by side: the same verdict and numbers, overall and per limit,
 * after each. A take or adjustment with an idempotency key is applied once: a repeat of the same request
 * gets the first answer (`repeated`) and changes nothing, another request under the key is refused as
 * a conflict and changes nothing (the window, 5 minutes, outlasts a run). `advance` moves the store's
 * clock by dtUs.
 */
export async function checkMultiAgainstModel(store: Store, advance: (dtUs: number) => void, specs: ModelLimitSpec[], ops: MultiOp[]): Promise<void> {
  const names = specs.map((_, i) => `l${i}`);
  const limits = Object.fromEntries(specs.map((s, i) => [names[i]!, { capacity: s.capacity, refillPerSecond: s.p / s.q }]));
  const limiter = createLimiter({ store, policies: { x: { limits } } });
  const model = new MultiBucket(specs);
  const smallest = Math.min(...specs.map((s) => s.capacity));
  const view = (d: Awaited<ReturnType<typeof limiter.take>>) => ({
    allowed: d.allowed,
    limit: d.limit,
    remaining: d.remaining,
    resetAfterMs: d.resetAfterMs,
    retryAfterMs: d.retryAfterMs,
    waitMs: d.waitMs,
    limits: d.reason === 'store_error' ? undefined : d.limits?.map(({ remaining, resetAfterMs, retryAfterMs, waitMs }) => ({ remaining, resetAfterMs, retryAfterMs, waitMs })),
  });
  // What each idempotency key was first used for, and the answer it got.
  const records = new Map<string, { request: string; want: ReturnType<MultiBucket['peek']> }>();
  /** The model's answer to a request under `id`: the first answer again, a conflict, or `apply()`. */
  const once = (id: string | undefined, request: string, apply: () => ReturnType<MultiBucket['peek']>) => {
    if (id === undefined) return apply();
    const seen = records.get(id);
    if (seen === undefined) {
      const want = apply();
      records.set(id, { request, want });
      return want;
    }
    return seen.request === request ? { ...seen.want, repeated: true } : 'conflict';
  };
  let t = 0;
  for (const op of ops) {
    t += op.dtUs;
    advance(op.dtUs);
    let want: ReturnType<MultiBucket['peek']> | 'conflict';
    let got: Awaited<ReturnType<typeof limiter.take>> | 'conflict';
    const conflict = (err: unknown): 'conflict' => {
      if ((err as Error).name !== 'IdempotencyConflictError') throw err;
      return 'conflict';
    };
    const idem = op.id === undefined ? {} : { idempotencyKey: op.id };
    if (op.kind === 'take' || op.kind === 'take-all') {
      const costs = specs.map((s, i) => Math.min(op.costs[i]!, s.capacity));
      if (op.kind === 'take-all') costs.fill(Math.max(1, Math.min(op.costs[0]!, smallest)));
      if (!costs.some((c) => c > 0)) costs[0] = 1;
      const cost = op.kind === 'take-all' ? costs[0]! : Object.fromEntries(names.map((n, i) => [n, costs[i]!]));
      want = once(op.id, JSON.stringify(['take', cost, op.maxWaitMs]), () => model.take(t, costs, op.maxWaitMs));
      got = await limiter.take('x', 'k', { cost, maxWaitMs: op.maxWaitMs, ...idem }).catch(conflict);
    } else if (op.kind === 'adjust') {
      const costs = specs.map((_, i) => op.adjust[i]!);
      if (!costs.some((c) => c !== 0)) costs[0] = -1;
      const cost = Object.fromEntries(names.map((n, i) => [n, costs[i]!]));
      want = once(op.id, JSON.stringify(['adjust', cost]), () => model.adjust(t, costs));
      got = await limiter.adjust('x', 'k', cost, idem).catch(conflict);
    } else {
      want = model.peek(t);
      got = await limiter.peek('x', 'k');
    }
    if (want === 'conflict' || got === 'conflict') {
      expect({ t, op: op.kind, got }).toEqual({ t, op: op.kind, got: want });
      continue;
    }
    expect({ t, op: op.kind, ...view(got), repeated: got.repeated }).toEqual({ t, op: op.kind, repeated: undefined, ...want });
  }
}
