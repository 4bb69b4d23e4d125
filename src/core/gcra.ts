// The token bucket, continuous refill, in exact integer arithmetic. Pure: time is a parameter.
// Every store runs `step` atomically against its own clock: the memory store and the Durable Object
// call it, the Redis scripts and the MongoDB pipeline mirror its lines.
//
// A policy has one or more limits, each a token bucket; one stored bucket holds all of them: each
// limit's debt in its own units (how far below full it is; see ResolvedLimit.tokenUnits) and the store
// clock's reading, in whole µs, when they had those debts. No state is every limit full. All of them
// are integers below 2^53, held exactly by a double in every store, and a step only adds, subtracts and
// multiplies them (or divides with exact floor corrections), so no store rounds: every store gives the
// same answer as an exact model, at every rate the policy allows.
//
// Invariants, per limit i:
// - debt_i now = max(0, debt_i at tUs - (nowUs - tUs) * refillUnitsPerUs_i); tokens_i = (capacityUnits_i - debt_i) / tokenUnits_i.
// - A take of cost_i tokens adds cost_i * tokenUnits_i of debt. It is allowed when, for every limit, the
//   new debt is at most limitUnits_i (capacityUnits_i + the reservation's maxWaitMs of refill); when some
//   debt is above its capacityUnits_i, the caller waits for the largest excess.
// - A take is all or nothing: allowed, every limit is charged; denied, nothing changes.
import type { ResolvedLimit, ResolvedPolicy } from './policy.js';
import { MAX_LIMIT_UNITS } from './policy.js';
import type { BucketDecision, LimitDecision } from './decision.js';
import { MAX_WAIT_MS } from './key.js';
import type { PolicyOverride, StepBase } from './override-types.js';
import type { LimitStep, StepArgs, StepResult } from './step.js';
import { ceilDiv, floorDiv } from './units.js';

export { ceilDiv, floorDiv };

export type { LimitStep, OpArgs, OpRecord, StepArgs, StepResult } from './step.js';
export { chargedUnitsOf, repeatOf, settledArgs, SETTLE_OP } from './step.js';

/**
 * A bucket's stored state: each limit's debt in its units at the store clock's reading `atUs` (whole µs),
 * and while a reservation is pending, `reservedUntilUs`: the store clock's reading (whole µs, rounded
 * up) at which the last one granted is due. A change of numbers before then carries the bucket as it
 * will stand then (core/override.ts carryDebt), so that the reservations keep their times and no new
 * admission comes on top of them.
 */
export interface BucketState {
  debtUnits: readonly number[];
  atUs: number;
  reservedUntilUs?: number;
}

/**
 * How long after its slot a reservation's caller may come: a decision tells it whole ms (waitMs, rounded
 * up), so it goes up to 1 ms after the µs its bucket counted the token at. A bucket keeps its horizon
 * that much longer, and a change of numbers in that ms counts that much less refill (core/override.ts
 * carryDebt).
 */
export const CALLER_LAG_US = 1000;

/**
 * The refill carryDebt does not count for the callers still to come of reservations due in the ms before
 * the change at atUs (their slots in (atUs - CALLER_LAG_US, atUs]): at most CALLER_LAG_US of `from`'s
 * refill (what the bucket counted since the earliest such slot), and at most what those reservations
 * took, which exact GCRA bounds by the capacity plus the refill over the slots' span (up to the latest,
 * reservedUntilUs, or atUs while one is pending). Capped with the debt at MAX_LIMIT_UNITS.
 */
export function lagUnits(debtUnits: number, from: Pick<LimitStep, 'refillUnitsPerUs'> & { capacityUnits: number }, atUs: number, reservedUntilUs: number): number {
  const spanUs = Math.min(reservedUntilUs, atUs) - (atUs - CALLER_LAG_US);
  const more = Math.min(CALLER_LAG_US * from.refillUnitsPerUs, from.capacityUnits + spanUs * from.refillUnitsPerUs);
  return Math.max(0, Math.min(MAX_LIMIT_UNITS - debtUnits, more));
}

/** The reservation horizon a write at nowUs keeps: `state`'s while its caller may still come (CALLER_LAG_US), or the later of it and `dueUs`. */
function horizon(state: BucketState | undefined, nowUs: number, dueUs = 0): number | undefined {
  const r = state?.reservedUntilUs;
  const h = r !== undefined && r > dueUs ? r : dueUs;
  return h > 0 && h > nowUs - CALLER_LAG_US ? h : undefined;
}

/** `s` as a bucket to store, or null (delete it): one in debt, or keeping a horizon whose caller may still come. */
export const written = (s: BucketState): BucketState | null => (s.debtUnits.some((d) => d > 0) || s.reservedUntilUs !== undefined ? s : null);

/** A bucket to write at nowUs: the debts, and the reservation horizon kept (see horizon). */
export function stateAt(debtUnits: readonly number[], nowUs: number, state: BucketState | undefined, dueUs = 0): BucketState {
  const r = horizon(state, nowUs, dueUs);
  return r === undefined ? { debtUnits, atUs: nowUs } : { debtUnits, atUs: nowUs, reservedUntilUs: r };
}

/** How many tokens of a partial grant fit: the largest k <= maxTokens with debt + k * tokenUnits <= limit. */
export function grantTokens(debtUnits: number, limitUnits: number, tokenUnits: number, maxTokens: number): number {
  return Math.max(0, Math.min(maxTokens, floorDiv(limitUnits - debtUnits, tokenUnits)));
}

/** A limit's debt cap for a wait of maxWaitMs: capacityUnits plus that much refill, at most MAX_LIMIT_UNITS. */
function limitUnitsOf(limit: ResolvedLimit, maxWaitMs: number): number {
  return maxWaitMs === 0 ? limit.capacityUnits : Math.min(MAX_LIMIT_UNITS, limit.capacityUnits + maxWaitMs * limit.unitsPerMs);
}

/** Per-limit token costs: a number charges every limit that number. */
export type Costs = number | readonly number[];

const costOf = (costs: Costs, i: number): number => (typeof costs === 'number' ? costs : costs[i]!);

/**
 * The step arguments of a take of `costs` tokens (per limit, or one number for every limit) that may
 * wait up to maxWaitMs. The wait's units are capped so that each limit stays at most MAX_LIMIT_UNITS: a
 * reservation further ahead is refused (at the fastest rates with a rate that is no whole number of
 * units per µs, that horizon can be under an hour).
 */
export function stepArgs(policy: ResolvedPolicy, costs: Costs, maxWaitMs: number, change?: PolicyOverride, seenUs?: number, holdMs?: number): StepArgs {
  return {
    limits: policy.limits.map((l, i) => ({ costUnits: costOf(costs, i) * l.tokenUnits, limitUnits: limitUnitsOf(l, maxWaitMs), refillUnitsPerUs: l.refillUnitsPerUs })),
    ...baseOf(policy, maxWaitMs, change, seenUs, holdMs),
  };
}

/**
 * StepArgs.base of a step on `policy` that may wait maxWaitMs, and this node's view of the policy-wide
 * change: .policy when it sees one, else .policySeenUs (seenUs) when it has read the record; and
 * .policyHoldMs (holdMs), how long a key's copy or marker this step writes is held.
 */
function baseOf(policy: ResolvedPolicy, maxWaitMs: number, change: PolicyOverride | undefined, seenUs: number | undefined, holdMs: number | undefined): { base: StepBase } & PolicyView {
  const base = { tokenUnits: policy.limits.map((l) => l.tokenUnits), capacityUnits: policy.limits.map((l) => l.capacityUnits), maxWaitMs };
  return { base, ...policyView(change, seenUs, holdMs) };
}

/** What a step carries of a node's view of the policy-wide change (StepArgs.policy, .policySeenUs, .policyHoldMs). */
export type PolicyView = Pick<StepArgs, 'policy' | 'policySeenUs' | 'policyHoldMs'>;

/** A node's view as a step carries it: the change it sees, else the version it read (seenUs), and the hold. */
export function policyView(change: PolicyOverride | undefined, seenUs: number | undefined, holdMs: number | undefined): PolicyView {
  const out: { -readonly [K in keyof PolicyView]: PolicyView[K] } = {};
  if (change !== undefined) out.policy = change;
  else if (seenUs !== undefined) out.policySeenUs = seenUs;
  if (holdMs !== undefined) out.policyHoldMs = holdMs;
  return out;
}

/**
 * The step arguments of an adjustment by `costs` tokens per limit (below 0 a refund, above a charge):
 * a charge may put a limit into debt up to MAX_WAIT_MS (one hour) of its refill beyond empty, the
 * horizon of a reservation.
 */
export function adjustArgs(policy: ResolvedPolicy, costs: Costs, change?: PolicyOverride, seenUs?: number, holdMs?: number): StepArgs {
  return {
    limits: policy.limits.map((l, i) => ({ costUnits: costOf(costs, i) * l.tokenUnits, limitUnits: limitUnitsOf(l, MAX_WAIT_MS), refillUnitsPerUs: l.refillUnitsPerUs })),
    adjust: true,
    ...baseOf(policy, MAX_WAIT_MS, change, seenUs, holdMs),
  };
}

/**
 * The step arguments of a settlement of the charge recorded under `chargeId` at `costs` tokens per limit
 * (the actual cost, each at least 0): adjustArgs' limits with those costs, and StepArgs.settle.
 */
export function settleArgs(policy: ResolvedPolicy, costs: Costs, chargeId: string, change?: PolicyOverride, seenUs?: number, holdMs?: number): StepArgs {
  return { ...adjustArgs(policy, costs, change, seenUs, holdMs), settle: { chargeId } };
}

/**
 * A refund of `units` of a policy's one limit (a lease giving back what it did not use). With `sinceUs`
 * (the store clock's reading at the grant) the store decays it by the refill since, when it applies it;
 * without, `units` must already be decayed.
 */
export function refundArgs(policy: ResolvedPolicy, units: number, sinceUs?: number, change?: PolicyOverride, seenUs?: number, holdMs?: number): StepArgs {
  const limits = [{ costUnits: -units, limitUnits: policy.capacityUnits, refillUnitsPerUs: policy.refillUnitsPerUs }];
  const args = { limits, adjust: true, ...baseOf(policy, 0, change, seenUs, holdMs) };
  return sinceUs === undefined ? args : { ...args, refundSinceUs: sinceUs };
}

/** A lease grant (a policy of one limit): as many of `tokens` tokens as exist now, at least one. */
export function grantArgs(policy: ResolvedPolicy, tokens: number, change?: PolicyOverride, seenUs?: number, holdMs?: number): StepArgs {
  return { ...stepArgs(policy, tokens, 0, change, seenUs, holdMs), tokenUnits: policy.tokenUnits };
}

/**
 * The units a refund of `costUnits` (below 0) gives back at nowUs: all of them, or with sinceUs, what
 * the bucket has not refilled since that reading (exact: integers below 2^53 while that refill is below
 * the refund; beyond it, nothing goes back either way).
 */
export function refundUnitsAt(costUnits: number, refillUnitsPerUs: number, sinceUs: number | undefined, nowUs: number): number {
  const units = -costUnits;
  if (sinceUs === undefined) return units;
  const back = units - Math.max(0, nowUs - sinceUs) * refillUnitsPerUs;
  return back > 0 ? back : 0;
}

/** The debt now of limit `i` of a bucket stored as `state`, at the store clock's reading nowUs. */
export function debtAt(state: BucketState | undefined, i: number, nowUs: number, refillUnitsPerUs: number): number {
  if (state === undefined) return 0;
  // A bucket stored with fewer limits (the policy gained one) holds that one full.
  return decayed(state.debtUnits[i] ?? 0, state.atUs, nowUs, refillUnitsPerUs);
}

/** A debt stored at atUs, at nowUs: what debtAt computes, on numbers (a store that keeps them unboxed). */
export function decayed(debtUnits: number, atUs: number, nowUs: number, refillUnitsPerUs: number): number {
  // Exact while the refill is below the debt (both below 2^53); beyond it the bucket is full either way.
  // A clock that went back (a failover to a server behind) raises the debt, as a TAT would.
  const debt = debtUnits - (nowUs - atUs) * refillUnitsPerUs;
  return debt > 0 ? debt : 0;
}

/**
 * A take of l.costUnits (above 0) on one limit whose debt now is debtUnits, on numbers: the debt after
 * when allowed, or -1 - debtUnits when refused (the debt unchanged; always below 0). `step` on a bucket
 * of one limit, without its objects: Store.takeOneSync answers with it.
 */
export function takeUnits(debtUnits: number, l: LimitStep): number {
  const after = debtUnits + l.costUnits;
  return after > l.limitUnits ? -1 - debtUnits : after;
}

/**
 * One step at nowUs (the store's clock, whole µs) on a bucket stored as `state` (undefined: full).
 * `write` is the state to store when it changed: positive debts at nowUs, or null to delete the bucket
 * (every limit is full); undefined when nothing is to be written.
 */
export function step(state: BucketState | undefined, nowUs: number, args: StepArgs, capsUnits: readonly number[] | undefined = args.base?.capacityUnits): StepResult & { write?: BucketState | null } {
  const { limits } = args;
  const n = limits.length;
  if (n === 1 && !args.adjust && args.tokenUnits === undefined) return takeOne(state, nowUs, limits[0]!, capsUnits?.[0]);
  const debts = new Array<number>(n);
  let peek = true;
  for (let i = 0; i < n; i++) {
    const l = limits[i]!;
    debts[i] = debtAt(state, i, nowUs, l.refillUnitsPerUs);
    if (l.costUnits !== 0) peek = false;
  }
  if (peek) return { allowed: true, debtUnits: debts, atUs: nowUs };
  const after = new Array<number>(n);
  let tokens: number | undefined;
  let dueUs = 0;
  if (args.adjust) {
    // While a reservation is pending (due at h), and until its caller has come (CALLER_LAG_US after h), a
    // refund gives back only what it does not hold: each limit's debt stays at least the refill until h
    // plus its capacity (less the refill since h), as the last reservation left it (its caller comes
    // whatever a refund frees: room freed under it would be taken twice; review 16, F1).
    const h = state?.reservedUntilUs;
    const held = h !== undefined && h > nowUs - CALLER_LAG_US && capsUnits !== undefined;
    for (let i = 0; i < n; i++) {
      const { costUnits, limitUnits, refillUnitsPerUs } = limits[i]!;
      const d = debts[i]!;
      if (costUnits < 0) after[i] = Math.max(held ? Math.min(d, (h - nowUs) * refillUnitsPerUs + capsUnits[i]!) : 0, d - refundUnitsAt(costUnits, refillUnitsPerUs, args.refundSinceUs, nowUs), 0);
      else after[i] = d + costUnits > limitUnits ? Math.max(d, limitUnits) : d + costUnits;
    }
  } else if (args.tokenUnits !== undefined) {
    const { costUnits, limitUnits } = limits[0]!;
    tokens = grantTokens(debts[0]!, limitUnits, args.tokenUnits, costUnits / args.tokenUnits);
    if (tokens === 0) return { allowed: false, debtUnits: debts, tokens, atUs: nowUs };
    after[0] = debts[0]! + tokens * args.tokenUnits;
  } else {
    for (let i = 0; i < n; i++) {
      const { costUnits, limitUnits } = limits[i]!;
      // A take's costs are at least 0 (the limiter sees to it); a negative one is read as a refund, never
      // below 0, so that no input can make a debt negative.
      after[i] = costUnits < 0 ? Math.max(0, debts[i]! + costUnits) : debts[i]! + costUnits;
      if (costUnits > 0 && after[i]! > limitUnits) return { allowed: false, debtUnits: debts, atUs: nowUs };
    }
    if (capsUnits !== undefined) dueUs = dueOf(limits, after, capsUnits, nowUs);
    // A reservation comes when its slowest limit allows (dueUs): every limit it charges counts it then,
    // as a take at dueUs (its debt at least the refill until then, plus the cost), so that a limit that
    // refills sooner admits nothing on top of it when it comes.
    if (dueUs !== 0 && n > 1) {
      for (let i = 0; i < n; i++) {
        const { costUnits, refillUnitsPerUs } = limits[i]!;
        if (costUnits <= 0) continue;
        const atDue = Math.min(MAX_LIMIT_UNITS, (dueUs - nowUs) * refillUnitsPerUs + costUnits);
        if (atDue > after[i]!) after[i] = atDue;
      }
    }
  }
  // (A full bucket goes, but not while a reservation's caller may still come: see written.)
  const kept = written(stateAt(after, nowUs, state, dueUs));
  const write = kept ?? (state === undefined ? undefined : null);
  return tokens === undefined ? { allowed: true, debtUnits: after, atUs: nowUs, write } : { allowed: true, debtUnits: after, tokens, atUs: nowUs, write };
}

/**
 * `step` for a take on a policy of one limit, the hot path of every store: the same arithmetic without
 * the per-limit arrays (the property tests hold both paths to the same exact model).
 */
function takeOne(state: BucketState | undefined, nowUs: number, l: LimitStep, capUnits: number | undefined): StepResult & { write?: BucketState | null } {
  const d = debtAt(state, 0, nowUs, l.refillUnitsPerUs);
  const c = l.costUnits;
  if (c === 0) return { allowed: true, debtUnits: [d], atUs: nowUs };
  const a = c < 0 ? Math.max(0, d + c) : takeUnits(d, l);
  if (a < 0) return { allowed: false, debtUnits: [d], atUs: nowUs };
  const debtUnits = [a];
  if (a === 0) return { allowed: true, debtUnits, atUs: nowUs, write: state === undefined ? undefined : written(stateAt(debtUnits, nowUs, state)) };
  const dueUs = c > 0 && capUnits !== undefined && a > capUnits ? nowUs + ceilDiv(a - capUnits, l.refillUnitsPerUs) : 0;
  const write = dueUs === 0 && state?.reservedUntilUs === undefined ? { debtUnits, atUs: nowUs } : stateAt(debtUnits, nowUs, state, dueUs);
  return { allowed: true, debtUnits, atUs: nowUs, write };
}

/**
 * When a take that left debts `after` (at nowUs) is due: when every limit it charged has refilled to its
 * capacity in force (capsUnits), in whole µs rounded up; 0 when it is due at once.
 */
export function dueOf(limits: readonly LimitStep[], after: readonly number[], capsUnits: readonly number[], nowUs: number): number {
  let wait = 0;
  for (let i = 0; i < limits.length; i++) {
    const l = limits[i]!;
    const over = after[i]! - capsUnits[i]!;
    if (l.costUnits > 0 && over > 0) {
      const w = ceilDiv(over, l.refillUnitsPerUs);
      if (w > wait) wait = w;
    }
  }
  return wait === 0 ? 0 : nowUs + wait;
}

/**
 * A debt the store reported `elapsedMs` ago (this node's monotonic clock), decayed by the refill since.
 * For answers a node gives without the store (deny cache, leases): rounded down, so the debt it states
 * is never more than the store's, and a retry hint made from it is never late.
 */
export function debtAfterMs(debtUnits: number, elapsedMs: number, unitsPerMs: number): number {
  return Math.max(0, debtUnits - Math.ceil(elapsedMs * unitsPerMs));
}

/** Ms until a limit with this debt is full again, rounded up (how long its state must be kept). */
export function fullAfterMs(debtUnits: number, refillUnitsPerUs: number): number {
  return ceilDiv(debtUnits, refillUnitsPerUs * 1000);
}

/**
 * A peek's Decision: `allowed` says whether a take of 1 on every limit would pass now (the same test the
 * store applies), so an empty bucket, or one holding a reservation, is not "allowed". Consumes nothing.
 */
export function toPeekDecision(policy: ResolvedPolicy, result: StepResult): BucketDecision {
  const allowed = policy.limits.every((l, i) => result.debtUnits[i]! + l.tokenUnits <= l.capacityUnits);
  return toDecision(policy, 1, { allowed, debtUnits: result.debtUnits });
}

/** One limit's numbers in a decision, exact: integer divisions, rounded as stated. */
function limitDecision(l: ResolvedLimit, cost: number, debt: number, allowed: boolean): LimitDecision {
  const { capacityUnits, tokenUnits, unitsPerMs, capacity } = l;
  // Time until `cost` tokens exist in this limit: its debt must fall to capacityUnits - cost * tokenUnits.
  const short = debt + cost * tokenUnits - capacityUnits;
  return {
    name: l.name,
    limit: capacity,
    remaining: debt >= capacityUnits ? 0 : Math.min(capacity, floorDiv(capacityUnits - debt, tokenUnits)),
    resetAfterMs: debt > 0 ? ceilDiv(debt, unitsPerMs) : 0,
    // A limit charged nothing admits the take whatever its debt.
    retryAfterMs: allowed || cost === 0 || short <= 0 ? 0 : Math.max(1, ceilDiv(short, unitsPerMs)),
    // A limit charged nothing does not hold the take back, whatever its own reservations.
    waitMs: allowed && cost > 0 && debt > capacityUnits ? ceilDiv(debt - capacityUnits, unitsPerMs) : 0,
  };
}

/**
 * The decision of a policy of one limit whose debt is debtUnits after a take of `cost` tokens (allowed),
 * or before it (refused): limitDecision's numbers for the one limit, made into the decision directly.
 */
export function oneLimitDecision(policy: ResolvedPolicy, cost: number, allowed: boolean, debtUnits: number): BucketDecision {
  const { capacityUnits, tokenUnits, unitsPerMs, capacity } = policy;
  const remaining = debtUnits >= capacityUnits ? 0 : Math.min(capacity, floorDiv(capacityUnits - debtUnits, tokenUnits));
  const resetAfterMs = debtUnits > 0 ? ceilDiv(debtUnits, unitsPerMs) : 0;
  if (allowed) {
    const waitMs = cost > 0 && debtUnits > capacityUnits ? ceilDiv(debtUnits - capacityUnits, unitsPerMs) : 0;
    return { allowed, limit: capacity, remaining, retryAfterMs: 0, resetAfterMs, waitMs };
  }
  return { allowed, limit: capacity, remaining, retryAfterMs: Math.max(1, ceilDiv(debtUnits + cost * tokenUnits - capacityUnits, unitsPerMs)), resetAfterMs, waitMs: 0 };
}

/**
 * Turns a store's step result into the public Decision. Exact: integer divisions, rounded as stated.
 * With several limits: `retryAfterMs` is the time until every limit admits the cost and `waitMs` the
 * longest wait; `limit`, `remaining` and `resetAfterMs` are those of the most constraining limit (a
 * refusal: the one that admits last; allowed: the one with the fewest tokens left), and `limits` has
 * each limit's own numbers.
 */
export function toDecision(policy: ResolvedPolicy, costs: Costs, result: StepResult): BucketDecision {
  const { allowed } = result;
  if (policy.limits.length === 1) return oneLimitDecision(policy, costOf(costs, 0), allowed, result.debtUnits[0]!);
  const limits = policy.limits.map((l, i) => limitDecision(l, costOf(costs, i), result.debtUnits[i]!, allowed));
  let bound = limits[0]!;
  for (const d of limits) {
    const tighter = allowed
      ? d.remaining < bound.remaining || (d.remaining === bound.remaining && d.resetAfterMs > bound.resetAfterMs)
      : d.retryAfterMs > bound.retryAfterMs;
    if (tighter) bound = d;
  }
  return {
    allowed,
    limit: bound.limit,
    remaining: bound.remaining,
    retryAfterMs: allowed ? 0 : Math.max(1, bound.retryAfterMs),
    resetAfterMs: bound.resetAfterMs,
    waitMs: allowed ? Math.max(...limits.map((d) => d.waitMs)) : 0,
    limits,
  };
}
