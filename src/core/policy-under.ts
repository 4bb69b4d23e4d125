// A policy as it decides under other numbers (a key's override record, a policy-wide change): the
// figures a decision reports (core/override.ts re-exports policyUnder).
import type { OverrideLimit } from './override-types.js';
import type { ResolvedLimit, ResolvedPolicy } from './policy.js';

/**
 * The policy as it decides under the numbers `limits` (StepResult.limits): each limit's capacity and
 * refill from them, its name and everything else the policy's. toDecision(policyUnder(policy, r.limits),
 * cost, r) is the decision of a step that ran under a record.
 */
export function policyUnder(policy: ResolvedPolicy, limits: readonly OverrideLimit[]): ResolvedPolicy {
  const resolved = policy.limits.map((l, i) => limitUnder(l, limits[i] ?? l));
  return Object.freeze({ ...policy, ...resolved[0]!, name: policy.name, limits: resolved });
}

/** One limit under other numbers: capacity and refill from them, and the figures derived (for reports). */
function limitUnder(l: ResolvedLimit, n: OverrideLimit): ResolvedLimit {
  if (n.tokenUnits === l.tokenUnits && n.capacityUnits === l.capacityUnits && n.refillUnitsPerUs === l.refillUnitsPerUs) return l;
  const capacity = Math.floor(n.capacityUnits / n.tokenUnits);
  const refillPerSecond = (n.refillUnitsPerUs * 1e6) / n.tokenUnits;
  const intervalMs = 1000 / refillPerSecond;
  const burstMs = capacity * intervalMs;
  return Object.freeze({
    ...l,
    capacity,
    refillPerSecond,
    ...rateOf(n),
    tokenUnits: n.tokenUnits,
    refillUnitsPerUs: n.refillUnitsPerUs,
    unitsPerMs: n.refillUnitsPerUs * 1000,
    capacityUnits: n.capacityUnits,
    intervalMs,
    burstMs,
    windowSeconds: Math.max(1, Math.ceil(burstMs / 1000 - 1e-9)),
  });
}

/** The rate of numbers `n` as a ratio of integers in lowest terms: refillUnitsPerUs * 1e6 / tokenUnits tokens per second. */
function rateOf(n: OverrideLimit): { rateNumerator: number; rateDenominator: number } {
  let [a, b] = [BigInt(n.refillUnitsPerUs) * 1_000_000n, BigInt(n.tokenUnits)];
  const [p, q] = [a, b];
  while (b !== 0n) [a, b] = [b, a % b];
  return { rateNumerator: Number(p / a), rateDenominator: Number(q / a) };
}
