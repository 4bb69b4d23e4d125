// The local fallback of policies with onStoreError 'local' (an "insurance limiter"): while the store
// fails, this node decides from its own bucket per key, with the policy's local limit, on the memory
// store's code. The buckets exist only during an outage: the first answer from the store drops them all.
import { stepArgs, toDecision, toPeekDecision } from '../core/gcra.js';
import type { BucketDecision } from '../core/decision.js';
import type { ResolvedPolicy } from '../core/policy.js';
import { memoryStore, type MemoryStore } from '../stores/memory.js';

export interface LocalFallback {
  /**
   * Decides a take (cost ≥ 1) or a peek (cost 0) of a policy with a local limit from this node's bucket
   * for the key: reason 'local', `limit` the local capacity. A cost above the local capacity is refused.
   */
  decide(policy: ResolvedPolicy, storageKey: string, cost: number, maxWaitMs: number): BucketDecision;
  /** The store answered: every local bucket is dropped, and decisions are the store's again. */
  storeAnswered(): void;
  /** Drops one key's local bucket (reset). */
  forget(storageKey: string): void;
  /** Keys with a local bucket now. */
  size(): number;
}

/** Retry hint for a cost the local limit can never admit: the store may be back by then. */
const TOO_LARGE_RETRY_MS = 1000;

export function createLocalFallback(options: { maxKeys: number; nowMs?: () => number }): LocalFallback {
  // Made at the first failure, dropped at the next store answer: a healthy store costs nothing here.
  let buckets: MemoryStore | undefined;
  return {
    decide(policy, storageKey, cost, maxWaitMs) {
      const local = policy.local!;
      if (cost > local.capacity) {
        return { allowed: false, limit: local.capacity, remaining: 0, retryAfterMs: TOO_LARGE_RETRY_MS, resetAfterMs: 0, waitMs: 0, reason: 'local' };
      }
      buckets ??= memoryStore({ maxKeys: options.maxKeys, ...(options.nowMs ? { nowMs: options.nowMs } : {}) });
      const result = buckets.stepSync(storageKey, stepArgs(local, cost, maxWaitMs));
      const decision = cost === 0 ? toPeekDecision(local, result) : toDecision(local, cost, result);
      return { ...decision, reason: 'local' };
    },
    storeAnswered() {
      buckets = undefined;
    },
    forget(storageKey) {
      void buckets?.reset(storageKey);
    },
    size: () => buckets?.size ?? 0,
  };
}
