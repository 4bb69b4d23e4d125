// Deny cache: remembers the store's refusals on this node and answers repeats locally until the
// refused tokens would exist, without a store call. Times are this node's monotonic clock (relative
// time), so clock skew cannot matter, and it can only refuse what the store would refuse.
//
// Known limit: a reset, a refill by any other means or a change of limits made through another node is
// not seen here while the refusal is cached: until its retryAfterMs has passed, and at most maxAgeMs
// (the limiter's policyRefreshMs), so a long refusal (a deep debt under a slow refill) is asked again.
import { debtAfterMs, toDecision, type Costs } from '../core/gcra.js';
import type { Decision, LimitNumbers } from '../core/decision.js';
import type { ResolvedPolicy } from '../core/policy.js';

interface Entry {
  /** The policy under the numbers the store refused with (a runtime change's, or the policy itself). */
  policy: ResolvedPolicy;
  /** The refusal's Decision.limitsInForce (absent: the policy's own numbers). */
  numbers: readonly LimitNumbers[] | undefined;
  /** When the refused cost is due again (monotonic ms); the entry is useless afterwards. */
  untilMs: number;
  /** The refused cost: one number for every limit, or per limit. */
  cost: Costs;
  /** Each limit's debt as the store reported it, at `atMs` (monotonic, taken before the call). */
  debtUnits: readonly number[];
  atMs: number;
}

const part = (cost: Costs, i: number): number => (typeof cost === 'number' ? cost : cost[i]!);

/** Whether `cost` asks at least as much as `refused` of every limit (so it is refused too). */
function atLeast(cost: Costs, refused: Costs, limits: number): boolean {
  for (let i = 0; i < limits; i++) if (part(cost, i) < part(refused, i)) return false;
  return true;
}

export interface DenyCache {
  /** A refusal for this request, recomputed for now, or undefined when the store must decide. */
  lookup(policy: ResolvedPolicy, storageKey: string, cost: Costs, maxWaitMs: number, nowMs: number): Decision | undefined;
  /**
   * Remembers a store refusal of `cost` with the bucket's debt `debtUnits` under `inForce` (the numbers
   * the store refused with), decided by a call that started at `atMs`, unless the key was forgotten since
   * that call started (the refusal may predate a refund or a change of limits).
   */
  remember(storageKey: string, inForce: ResolvedPolicy, numbers: readonly LimitNumbers[] | undefined, cost: Costs, debtUnits: readonly number[], atMs: number, retryAfterMs: number): void;
  /**
   * Drops the key's refusal, and refuses to remember any refusal decided by a call that started at or
   * before `nowMs` (a reset, or a refund this node made: tokens the refusal did not see).
   */
  forget(storageKey: string, nowMs: number): void;
  /** forget() for every key at once (a policy-wide change of limits). */
  clear(nowMs: number): void;
}

export function createDenyCache(maxKeys: number, maxAgeMs = Infinity): DenyCache {
  const entries = new Map<string, Entry>();
  // When each key was last forgotten, at most maxKeys of them; the latest time dropped from it covers
  // every key not in it, so bounding it never lets a refusal older than a forget in.
  const forgotten = new Map<string, number>();
  let forgottenFloorMs = -Infinity;
  return {
    lookup(policy, storageKey, cost, maxWaitMs, nowMs) {
      const hit = entries.get(storageKey);
      if (!hit) return undefined;
      const leftMs = hit.untilMs - nowMs;
      if (leftMs <= 0) {
        entries.delete(storageKey);
        return undefined;
      }
      // Only a request at least as large on every limit, that will not wait as long, is certainly refused too.
      if (maxWaitMs >= leftMs || !atLeast(cost, hit.cost, policy.limits.length)) return undefined;
      // The debts have fallen by the time elapsed since the call started. Measuring from the start (not
      // the store's decision, which came later) can only under-state them: the retry hint is never late.
      const elapsedMs = nowMs - hit.atMs;
      const p = hit.policy;
      const debtUnits = p.limits.map((l, i) => debtAfterMs(hit.debtUnits[i]!, elapsedMs, l.unitsPerMs));
      const decision = { ...toDecision(p, cost, { allowed: false, debtUnits }), reason: 'deny_cache' as const };
      if (hit.numbers) decision.limitsInForce = hit.numbers;
      return decision;
    },
    remember(storageKey, inForce, numbers, cost, debtUnits, atMs, retryAfterMs) {
      if (atMs <= (forgotten.get(storageKey) ?? forgottenFloorMs)) return;
      if (!entries.has(storageKey) && entries.size >= maxKeys) entries.delete(entries.keys().next().value!);
      entries.set(storageKey, { policy: inForce, numbers, untilMs: atMs + Math.min(retryAfterMs, maxAgeMs), cost, debtUnits, atMs });
    },
    clear(nowMs) {
      entries.clear();
      forgotten.clear();
      forgottenFloorMs = Math.max(forgottenFloorMs, nowMs);
    },
    forget(storageKey, nowMs) {
      entries.delete(storageKey);
      forgotten.delete(storageKey);
      if (forgotten.size >= maxKeys) {
        const [k, ms] = forgotten.entries().next().value!;
        forgotten.delete(k);
        forgottenFloorMs = Math.max(forgottenFloorMs, ms);
      }
      forgotten.set(storageKey, nowMs);
    },
  };
}
