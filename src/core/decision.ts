// The one result type returned everywhere: the library, the middleware, the permit endpoint and the client SDK.

/** Why a decision was not made by the bucket itself. */
export type DecisionReason =
  /**
   * The store failed, timed out, or is skipped while the circuit breaker is open after repeated
   * failures; the policy's onStoreError chose the outcome. (The onDecision event's `error` says which.)
   */
  | 'store_error'
  /** Answered from this node's deny cache: the store said no less than retryAfterMs ago. */
  | 'deny_cache'
  /**
   * Answered from this node's token lease (PolicyConfig.lease) without a store call: `remaining` is the
   * tokens left in this node's lease, `resetAfterMs` the store's last answer advanced by the time since.
   */
  | 'lease'
  /**
   * The store failed and the policy's onStoreError is 'local': decided by this node's own bucket for the
   * key, with the policy's local limit (`limit` is its capacity), until the store answers again.
   */
  | 'local';

interface DecisionBase {
  /** Whether the request may proceed (after waitMs, if that is above 0). */
  allowed: boolean;
  /** The bucket's capacity in tokens. */
  limit: number;
  /** 0 when allowed; otherwise ms until the requested tokens exist, rounded up. */
  retryAfterMs: number;
  /** Ms the caller must wait before acting on an allowed reservation; 0 for an immediate permit. */
  waitMs: number;
}

/** The bucket decided (directly, or through this node's deny cache). */
export interface BucketDecision extends DecisionBase {
  /** Whole tokens left after this decision (0 while a reservation is pending). */
  remaining: number;
  /** Ms until the bucket is full again, rounded up. */
  resetAfterMs: number;
  reason?: 'deny_cache' | 'lease' | 'local';
}

/**
 * The store did not answer: the policy's onStoreError chose `allowed`. The store gave no remaining count
 * or reset time, so those are absent rather than guessed.
 */
export interface StoreErrorDecision extends DecisionBase {
  reason: 'store_error';
  remaining?: undefined;
  resetAfterMs?: undefined;
}

/**
 * One decision. `reason` tells the two kinds apart: `if (d.reason !== 'store_error')` narrows
 * `remaining` and `resetAfterMs` to numbers.
 */
export type Decision = BucketDecision | StoreErrorDecision;
