// The local fallback of policies with onStoreError 'local' (an "insurance limiter"): while the store
// fails, this node decides from its own bucket per key, with the policy's local limits, on the memory
// store's code. A decision the store answers is the store's at once. The local buckets are kept until
// the store has answered, with no failure, for as long as the slowest of them takes to refill from empty
// (by then every one is full, so dropping them changes nothing): a store that fails only some calls, or
// flaps, cannot hand out a fresh local bucket on each failure.
import { stepArgs, toDecision, toPeekDecision, type Costs } from '../core/gcra.js';
import type { BucketDecision } from '../core/decision.js';
import type { ResolvedPolicy } from '../core/policy.js';
import { memoryStore, type MemoryStore } from '../stores/memory.js';

export interface LocalFallback {
  /**
   * Decides a take or a peek (cost 0) of a policy with a local limit from this node's bucket for the
   * key: reason 'local', `limit` the local capacity. A cost above a local limit's capacity is refused.
   */
  decide(policy: ResolvedPolicy, storageKey: string, cost: Costs, maxWaitMs: number): BucketDecision;
  /** The store answered: once it has answered with no failure for a whole refill window, the local buckets go. */
  storeAnswered(): void;
  /** Drops one key's local bucket (a reset the store applied). */
  forget(storageKey: string): void;
  /** Keys with a local bucket now. */
  size(): number;
}

/** Retry hint for a cost the local limit can never admit: the store may be back by then. */
const TOO_LARGE_RETRY_MS = 1000;

export function createLocalFallback(options: { maxKeys: number; monotonicMs: () => number; policies: Iterable<ResolvedPolicy> }): LocalFallback {
  const { monotonicMs } = options;
  // How long the slowest local limit takes to refill from empty: a local bucket is full that long after
  // its last local decision.
  let refillMs = 0;
  for (const p of options.policies) for (const l of p.local?.limits ?? []) refillMs = Math.max(refillMs, l.burstMs);
  // Made at the first failure; dropped once the store has answered for refillMs since the last one.
  let buckets: MemoryStore | undefined;
  let lastLocalMs = 0;
  return {
    decide(policy, storageKey, cost, maxWaitMs) {
      const local = policy.local!;
      lastLocalMs = monotonicMs();
      const tooLarge = local.limits.find((l, i) => (typeof cost === 'number' ? cost : cost[i]!) > l.capacity);
      if (tooLarge) {
        return { allowed: false, limit: tooLarge.capacity, remaining: 0, retryAfterMs: TOO_LARGE_RETRY_MS, resetAfterMs: 0, waitMs: 0, reason: 'local' };
      }
      buckets ??= memoryStore({ maxKeys: options.maxKeys, nowMs: monotonicMs });
      const result = buckets.stepSync(storageKey, stepArgs(local, cost, maxWaitMs));
      const decision = cost === 0 ? toPeekDecision(local, result) : toDecision(local, cost, result);
      return { ...decision, reason: 'local' };
    },
    storeAnswered() {
      if (buckets !== undefined && monotonicMs() - lastLocalMs >= refillMs) buckets = undefined;
    },
    forget(storageKey) {
      void buckets?.reset(storageKey);
    },
    size: () => buckets?.size ?? 0,
  };
}
