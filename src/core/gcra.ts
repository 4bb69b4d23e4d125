// The token bucket as GCRA: one number per bucket, its TAT (theoretical arrival time, ms since the
// epoch). Pure: time is a parameter. Stores implement `step` atomically with their own clock; the
// memory store calls it directly, the Redis script and the MongoDB pipeline mirror its three lines.
//
// Invariants (all times in ms):
// - debt = max(0, tat - now) is how far the bucket is below full, in time: tokens = capacity - debt / intervalMs.
// - A bucket with no state, or tat <= now, is full. Expiring a key once tat has passed is therefore harmless.
// - A request of `cost` tokens adds cost * intervalMs of debt. It is allowed when the new debt is at most
//   burstMs + maxWaitMs (+ slackMs for float rounding); when above burstMs, the caller waits the excess.
// - A denied request changes nothing.
import type { ResolvedPolicy } from './policy.js';
import type { BucketDecision } from './decision.js';

/**
 * What one atomic store step needs: both already multiplied out, so stores do no policy math. Stores
 * only read it: the limiter passes one shared object for every take of one token with no wait.
 */
export interface StepArgs {
  /**
   * Debt this request adds: cost * intervalMs. 0 means peek: read only, never write. Below 0 it is a
   * refund (a lease giving back tokens it did not use): the debt falls by that much but never below 0,
   * so a refund never makes a bucket fuller than full. A refund is always allowed.
   */
  readonly costMs: number;
  /** The largest debt allowed after the request: burstMs + maxWaitMs + slackMs. */
  readonly limitMs: number;
  /**
   * Partial grant (token leases): take the largest whole number of units of unitMs (intervalMs: one
   * token) that fits under limitMs, at most costMs / unitMs of them; denied only when not even one fits.
   * The result's `units` says how many were taken. Absent: all of costMs or nothing.
   */
  readonly unitMs?: number;
}

/** What every store returns from one atomic step. */
export interface StepResult {
  allowed: boolean;
  /** Debt after the step when allowed; the unchanged debt when denied or peeking. */
  debtMs: number;
  /** With StepArgs.unitMs: the units taken (0 when denied). */
  units?: number;
}

/**
 * How many units of a partial grant fit: the largest k <= maxUnits with debtMs + k * unitMs <= limitMs,
 * computed in the same float operations every store uses (the floor, then one correction each way, so a
 * quotient rounded across an integer cannot grant a unit that the full check would refuse).
 */
export function grantUnits(debtMs: number, limitMs: number, unitMs: number, maxUnits: number): number {
  let k = Math.min(maxUnits, Math.floor((limitMs - debtMs) / unitMs));
  if (k < maxUnits && debtMs + (k + 1) * unitMs <= limitMs) k++;
  if (k > 0 && debtMs + k * unitMs > limitMs) k--;
  return Math.max(0, k);
}

export function stepArgs(policy: ResolvedPolicy, cost: number, maxWaitMs: number): StepArgs {
  return { costMs: cost * policy.intervalMs, limitMs: policy.burstMs + maxWaitMs + policy.slackMs };
}

/** One GCRA step at `nowMs` on a bucket whose TAT is `tatMs` (undefined: no state, i.e. full). */
export function step(tatMs: number | undefined, nowMs: number, args: StepArgs): StepResult & { tatMs: number | undefined } {
  const debtMs = tatMs !== undefined && tatMs > nowMs ? tatMs - nowMs : 0;
  const { costMs, unitMs } = args;
  if (costMs === 0) return { allowed: true, debtMs, tatMs };
  if (costMs < 0) {
    const refunded = Math.max(0, debtMs + costMs);
    return { allowed: true, debtMs: refunded, tatMs: nowMs + refunded };
  }
  if (unitMs !== undefined) {
    const units = grantUnits(debtMs, args.limitMs, unitMs, Math.round(costMs / unitMs));
    if (units === 0) return { allowed: false, debtMs, tatMs, units };
    const granted = debtMs + units * unitMs;
    return { allowed: true, debtMs: granted, tatMs: nowMs + granted, units };
  }
  const after = debtMs + costMs;
  if (after > args.limitMs) return { allowed: false, debtMs, tatMs };
  return { allowed: true, debtMs: after, tatMs: nowMs + after };
}

/** Rounds a duration up to whole ms, treating anything within slack of a whole ms as that ms. */
function ceilMs(ms: number, slackMs: number): number {
  return ms <= slackMs ? 0 : Math.ceil(ms - slackMs);
}

/**
 * A peek's Decision: `allowed` says whether a take of cost 1 would pass now (the same test the store
 * applies), so an empty bucket, or one holding a reservation, is not "allowed". Consumes nothing.
 */
export function toPeekDecision(policy: ResolvedPolicy, result: StepResult): BucketDecision {
  const one = stepArgs(policy, 1, 0);
  return toDecision(policy, 1, { allowed: result.debtMs + one.costMs <= one.limitMs, debtMs: result.debtMs });
}

/** Turns a store's step result into the public Decision. */
export function toDecision(policy: ResolvedPolicy, cost: number, result: StepResult): BucketDecision {
  const { burstMs, intervalMs, slackMs, capacity } = policy;
  const debtMs = result.debtMs;
  // The slack absorbs float error, but never more than half a token, so at rates near the clock's
  // resolution (1e6/s: one token per µs) `remaining` does not report a token the slack merely tolerates.
  const toleranceMs = Math.min(slackMs, intervalMs / 2);
  const remaining = Math.min(capacity, Math.max(0, Math.floor((burstMs + toleranceMs - debtMs) / intervalMs)));
  const resetAfterMs = ceilMs(debtMs, slackMs);
  if (result.allowed) {
    return {
      allowed: true,
      limit: capacity,
      remaining,
      retryAfterMs: 0,
      resetAfterMs,
      waitMs: ceilMs(debtMs - burstMs, slackMs),
    };
  }
  return {
    allowed: false,
    limit: capacity,
    remaining,
    // Time until `cost` tokens exist: the debt must fall to burstMs - costMs.
    retryAfterMs: Math.max(1, ceilMs(debtMs + cost * intervalMs - burstMs, slackMs)),
    resetAfterMs,
    waitMs: 0,
  };
}
