// The token bucket, continuous refill, in exact integer arithmetic. Pure: time is a parameter.
// Every store runs `step` atomically against its own clock: the memory store and the Durable Object
// call it, the Redis scripts and the MongoDB pipeline mirror its lines.
//
// A bucket's state is its debt in units (how far below full it is; see ResolvedPolicy.tokenUnits) and
// the store clock's reading, in whole µs, when it had that debt. No state is a full bucket. All of them
// are integers below 2^53, held exactly by a double in every store, and a step only adds, subtracts and
// multiplies them (or divides with exact floor corrections), so no store rounds: every store gives the
// same answer as an exact model, at every rate the policy allows.
//
// Invariants:
// - debt now = max(0, debt at tUs - (nowUs - tUs) * refillUnitsPerUs); tokens = (capacityUnits - debt) / tokenUnits.
// - A request of `cost` tokens adds cost * tokenUnits of debt. It is allowed when the new debt is at most
//   capacityUnits + the reservation's maxWaitMs of refill; when above capacityUnits, the caller waits the excess.
// - A denied request changes nothing.
import type { ResolvedPolicy } from './policy.js';
import { MAX_LIMIT_UNITS } from './policy.js';
import type { BucketDecision } from './decision.js';

/**
 * What one atomic store step needs, multiplied out so that stores do no policy math. Stores only read
 * it: the limiter passes one shared object for every take of one token with no wait.
 */
export interface StepArgs {
  /**
   * Debt this request adds: cost * tokenUnits. 0 means peek: read only, never write. Below 0 it is a
   * refund (a lease giving back tokens it did not use): the debt falls by that much but never below 0,
   * so a refund never makes a bucket fuller than full. A refund is always allowed.
   */
  readonly costUnits: number;
  /** The largest debt allowed after the request: capacityUnits plus maxWaitMs of refill. */
  readonly limitUnits: number;
  /** Units refilled per µs of the store's clock (ResolvedPolicy.refillUnitsPerUs). */
  readonly refillUnitsPerUs: number;
  /**
   * Partial grant (token leases): take the largest whole number of tokens of tokenUnits each that fits
   * under limitUnits, at most costUnits / tokenUnits of them; denied only when not even one fits. The
   * result's `tokens` says how many were taken. Absent: all of costUnits or nothing.
   */
  readonly tokenUnits?: number;
  /**
   * With a refund (costUnits < 0): the store clock's reading, in whole µs, of the step that took the
   * tokens being given back (StepResult.atUs of a lease grant). The refund is then what the bucket has
   * not refilled since, reckoned at the store's clock when the refund is applied:
   * max(0, −costUnits − (nowUs − refundSinceUs) × refillUnitsPerUs). So a refund that reaches the store
   * late (queued behind others, a paused server) never gives back tokens the bucket has refilled meanwhile.
   */
  readonly refundSinceUs?: number;
}

/** What every store returns from one atomic step. */
export interface StepResult {
  allowed: boolean;
  /** Debt after the step when allowed; the unchanged debt when denied or peeking. In units. */
  debtUnits: number;
  /** With StepArgs.tokenUnits: the tokens taken (0 when denied). */
  tokens?: number;
  /**
   * The store clock's reading at this step, in whole µs, where the store reports it (every built-in
   * store does): a lease refund passes a grant's as StepArgs.refundSinceUs. A custom store that reports
   * it must honour refundSinceUs; one that does not report it gets refunds already decayed instead.
   */
  atUs?: number;
}

/** A bucket's stored state: its debt in units at the store clock's reading `atUs` (whole µs). */
export interface BucketState {
  debtUnits: number;
  atUs: number;
}

/**
 * floor(a / b) for integers below 2^53, exactly: the float quotient can round across an integer, so it
 * is corrected by one each way (the products stay below 2^53).
 */
export function floorDiv(a: number, b: number): number {
  let q = Math.floor(a / b);
  if (q * b > a) q--;
  else if ((q + 1) * b <= a) q++;
  return q;
}

/** ceil(a / b) for integers below 2^53, exactly. */
export function ceilDiv(a: number, b: number): number {
  const q = floorDiv(a, b);
  return q * b < a ? q + 1 : q;
}

/** How many tokens of a partial grant fit: the largest k <= maxTokens with debt + k * tokenUnits <= limit. */
export function grantTokens(debtUnits: number, limitUnits: number, tokenUnits: number, maxTokens: number): number {
  return Math.max(0, Math.min(maxTokens, floorDiv(limitUnits - debtUnits, tokenUnits)));
}

/**
 * The step arguments of a take of `cost` tokens that may wait up to maxWaitMs. The wait's units are
 * capped so that the limit stays at most MAX_LIMIT_UNITS: a reservation further ahead is refused (at the
 * fastest rates with a rate that is no whole number of units per µs, that horizon can be under an hour).
 */
export function stepArgs(policy: ResolvedPolicy, cost: number, maxWaitMs: number): StepArgs {
  const { capacityUnits, tokenUnits, unitsPerMs, refillUnitsPerUs } = policy;
  const limitUnits = maxWaitMs === 0 ? capacityUnits : Math.min(MAX_LIMIT_UNITS, capacityUnits + maxWaitMs * unitsPerMs);
  return { costUnits: cost * tokenUnits, limitUnits, refillUnitsPerUs };
}

/**
 * A refund of `units` (a lease giving back what it did not use). With `sinceUs` (the store clock's
 * reading at the grant) the store decays it by the refill since, when it applies it; without, `units`
 * must already be decayed.
 */
export function refundArgs(policy: ResolvedPolicy, units: number, sinceUs?: number): StepArgs {
  const args = { costUnits: -units, limitUnits: policy.capacityUnits, refillUnitsPerUs: policy.refillUnitsPerUs };
  return sinceUs === undefined ? args : { ...args, refundSinceUs: sinceUs };
}

/**
 * The units a refund gives back at nowUs: all of them, or with refundSinceUs, what the bucket has not
 * refilled since that reading (exact: integers below 2^53 while that refill is below the refund; beyond
 * it, nothing goes back either way).
 */
export function refundUnitsAt(args: StepArgs, nowUs: number): number {
  const units = -args.costUnits;
  if (args.refundSinceUs === undefined) return units;
  const back = units - Math.max(0, nowUs - args.refundSinceUs) * args.refillUnitsPerUs;
  return back > 0 ? back : 0;
}

/** A lease grant: as many of `tokens` tokens as exist now, at least one. */
export function grantArgs(policy: ResolvedPolicy, tokens: number): StepArgs {
  return { ...stepArgs(policy, tokens, 0), tokenUnits: policy.tokenUnits };
}

/** The debt now of a bucket stored as `state`, at the store clock's reading nowUs. */
export function debtAt(state: BucketState | undefined, nowUs: number, refillUnitsPerUs: number): number {
  if (state === undefined) return 0;
  // Exact while the refill is below the debt (both below 2^53); beyond it the bucket is full either way.
  // A clock that went back (a failover to a server behind) raises the debt, as a TAT would.
  const debt = state.debtUnits - (nowUs - state.atUs) * refillUnitsPerUs;
  return debt > 0 ? debt : 0;
}

/**
 * One step at nowUs (the store's clock, whole µs) on a bucket stored as `state` (undefined: full).
 * `write` is the state to store when it changed: a positive debt at nowUs, or null to delete the
 * bucket (it is full); undefined when nothing is to be written.
 */
export function step(state: BucketState | undefined, nowUs: number, args: StepArgs): StepResult & { write?: BucketState | null } {
  const debtUnits = debtAt(state, nowUs, args.refillUnitsPerUs);
  const { costUnits, tokenUnits } = args;
  if (costUnits === 0) return { allowed: true, debtUnits, atUs: nowUs };
  let after: number;
  let tokens: number | undefined;
  if (costUnits < 0) {
    after = Math.max(0, debtUnits - refundUnitsAt(args, nowUs));
  } else if (tokenUnits !== undefined) {
    tokens = grantTokens(debtUnits, args.limitUnits, tokenUnits, costUnits / tokenUnits);
    if (tokens === 0) return { allowed: false, debtUnits, tokens, atUs: nowUs };
    after = debtUnits + tokens * tokenUnits;
  } else {
    after = debtUnits + costUnits;
    if (after > args.limitUnits) return { allowed: false, debtUnits, atUs: nowUs };
  }
  const write = after > 0 ? { debtUnits: after, atUs: nowUs } : state === undefined ? undefined : null;
  return tokens === undefined ? { allowed: true, debtUnits: after, atUs: nowUs, write } : { allowed: true, debtUnits: after, tokens, atUs: nowUs, write };
}

/**
 * A debt the store reported `elapsedMs` ago (this node's monotonic clock), decayed by the refill since.
 * For answers a node gives without the store (deny cache, leases): rounded down, so the debt it states
 * is never more than the store's, and a retry hint made from it is never late.
 */
export function debtAfterMs(debtUnits: number, elapsedMs: number, unitsPerMs: number): number {
  return Math.max(0, debtUnits - Math.ceil(elapsedMs * unitsPerMs));
}

/** Ms until a bucket with this debt is full again, rounded up (how long its state must be kept). */
export function fullAfterMs(debtUnits: number, refillUnitsPerUs: number): number {
  return ceilDiv(debtUnits, refillUnitsPerUs * 1000);
}

/**
 * A peek's Decision: `allowed` says whether a take of cost 1 would pass now (the same test the store
 * applies), so an empty bucket, or one holding a reservation, is not "allowed". Consumes nothing.
 */
export function toPeekDecision(policy: ResolvedPolicy, result: StepResult): BucketDecision {
  return toDecision(policy, 1, { allowed: result.debtUnits + policy.tokenUnits <= policy.capacityUnits, debtUnits: result.debtUnits });
}

/** Turns a store's step result into the public Decision. Exact: integer divisions, rounded as stated. */
export function toDecision(policy: ResolvedPolicy, cost: number, result: StepResult): BucketDecision {
  const { capacityUnits, tokenUnits, unitsPerMs, capacity } = policy;
  const debt = result.debtUnits;
  const remaining = debt >= capacityUnits ? 0 : Math.min(capacity, floorDiv(capacityUnits - debt, tokenUnits));
  const resetAfterMs = debt > 0 ? ceilDiv(debt, unitsPerMs) : 0;
  if (result.allowed) {
    return {
      allowed: true,
      limit: capacity,
      remaining,
      retryAfterMs: 0,
      resetAfterMs,
      waitMs: debt > capacityUnits ? ceilDiv(debt - capacityUnits, unitsPerMs) : 0,
    };
  }
  return {
    allowed: false,
    limit: capacity,
    remaining,
    // Time until `cost` tokens exist: the debt must fall to capacityUnits - cost * tokenUnits.
    retryAfterMs: Math.max(1, ceilDiv(debt + cost * tokenUnits - capacityUnits, unitsPerMs)),
    resetAfterMs,
    waitMs: 0,
  };
}
