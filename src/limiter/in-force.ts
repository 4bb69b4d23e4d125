// Decisions under the numbers in force for a key: the policy's, or a runtime change's that the store
// applied in the same step (StepResult.limits), or a block (StepResult.blockedUntilUs). A runtime change's
// numbers are made into a policy of the same name once and kept (a few sets of numbers are in use at a
// time), so a decision under them is toDecision's, and the headers describe them.
import type { BucketDecision, LimitNumbers } from '../core/decision.js';
import { ceilDiv, toDecision, toPeekDecision, type Costs } from '../core/gcra.js';
import { policyUnder, type OverrideLimit } from '../core/override.js';
import type { ResolvedPolicy } from '../core/policy.js';
import type { StepResult } from '../store.js';
import { toNumbers } from './limits-input.js';

/** Most sets of runtime numbers kept as policies per limiter; beyond it the cache starts again. */
const MAX_KEPT = 1000;

export interface InForce {
  /** The policy under `limits` (a store's numbers, one per limit in the policy's order); the policy itself when undefined. */
  policyOf(policy: ResolvedPolicy, limits: readonly OverrideLimit[] | undefined): ResolvedPolicy;
  /** The decision of a take (or a peek: `peek`) that the store answered with `result`. */
  decide(policy: ResolvedPolicy, cost: Costs, result: StepResult, peek?: boolean): BucketDecision;
}

/** The RateLimit-Policy `w` of a limit: seconds to refill it from empty, rounded up (as ResolvedLimit.windowSeconds is made). */
export const windowSecondsOf = (capacity: number, refillPerSecond: number): number => Math.max(1, Math.ceil((capacity * (1000 / refillPerSecond)) / 1000 - 1e-9));

/**
 * The refusal of a blocked key under `policy` (the numbers in force: InForce.policyOf): nothing can be
 * taken from any limit until the block ends. A policy of several limits names each, as every other
 * decision does, so that the headers list the same limits.
 */
export function blockedDecision(policy: ResolvedPolicy, retryAfterMs: number): BucketDecision {
  const ms = Math.max(1, retryAfterMs);
  // With several limits, the smallest is the most constraining (the legacy headers' X-RateLimit-Limit).
  const d: BucketDecision = { allowed: false, limit: Math.min(...policy.limits.map((l) => l.capacity)), remaining: 0, retryAfterMs: ms, resetAfterMs: ms, waitMs: 0, reason: 'blocked' };
  if (policy.limits.length > 1) d.limits = policy.limits.map((l) => ({ name: l.name, limit: l.capacity, remaining: 0, retryAfterMs: ms, resetAfterMs: ms, waitMs: 0 }));
  return d;
}

/** Ms from a store's reading atUs until blockedUntilUs, rounded up. */
export const blockLeftMs = (result: StepResult): number => Math.max(1, ceilDiv(Math.max(0, result.blockedUntilUs! - (result.atUs ?? 0)), 1000));

interface Kept {
  policy: ResolvedPolicy;
  numbers: readonly LimitNumbers[];
}

export function createInForce(): InForce {
  const kept = new Map<string, Kept>();
  function keptOf(policy: ResolvedPolicy, limits: readonly OverrideLimit[]): Kept {
    let id = policy.name;
    for (const l of limits) id += `|${l.tokenUnits},${l.capacityUnits},${l.refillUnitsPerUs}`;
    let k = kept.get(id);
    if (k === undefined) {
      k = { policy: policyUnder(policy, limits), numbers: Object.freeze(toNumbers(policy, limits)) };
      if (kept.size >= MAX_KEPT) kept.clear();
      kept.set(id, k);
    }
    return k;
  }
  return {
    policyOf: (policy, limits) => (limits === undefined ? policy : keptOf(policy, limits).policy),
    decide(policy, cost, result, peek = false) {
      // Under the numbers in force, a blocked answer too (review 5, L1).
      const k = result.limits === undefined ? undefined : keptOf(policy, result.limits);
      const p = k?.policy ?? policy;
      const decision = result.blockedUntilUs !== undefined ? blockedDecision(p, blockLeftMs(result)) : peek ? toPeekDecision(p, result) : toDecision(p, cost, result);
      if (k) decision.limitsInForce = k.numbers;
      return decision;
    },
  };
}
