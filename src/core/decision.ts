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
  | 'local'
  /**
   * The key is blocked (limiter.block): refused whatever its bucket holds, until `retryAfterMs` has
   * passed or it is unblocked. Nothing was taken.
   */
  | 'blocked';

/** One limit's numbers as a caller writes and reads them. */
export interface LimitNumbers {
  /** The limit's name (a policy of one limit: the policy's). */
  name: string;
  /** Tokens the bucket holds when full. */
  capacity: number;
  /** Tokens added per second, continuously. */
  refillPerSecond: number;
}

interface DecisionBase {
  /** Whether the request may proceed (after waitMs, if that is above 0). */
  allowed: boolean;
  /** The bucket's capacity in tokens (with several limits, the most constraining one's). */
  limit: number;
  /** 0 when allowed; otherwise ms until the requested tokens exist, rounded up. */
  retryAfterMs: number;
  /** Ms the caller must wait before acting on an allowed reservation; 0 for an immediate permit. */
  waitMs: number;
}

/** One limit's numbers in a decision of a policy with several limits. */
export interface LimitDecision {
  /** The limit's name in the policy. */
  name: string;
  /** Its capacity in tokens. */
  limit: number;
  /** Whole tokens left in it after this decision. */
  remaining: number;
  /** Ms until it is full again, rounded up. */
  resetAfterMs: number;
  /** On a refusal: ms until this limit admits its cost (0: it admits it now, another limit refused). 0 when allowed. */
  retryAfterMs: number;
  /** On an allowed reservation: ms until this limit's part is due. */
  waitMs: number;
}

/** The bucket decided (directly, or through this node's deny cache). */
export interface BucketDecision extends DecisionBase {
  /** Whole tokens left after this decision (0 while a reservation is pending); of the most constraining limit. */
  remaining: number;
  /** Ms until the bucket is full again, rounded up; of the most constraining limit. */
  resetAfterMs: number;
  reason?: 'deny_cache' | 'lease' | 'local' | 'blocked';
  /**
   * The idempotency key of this request was applied before: this is that first answer, repeated, and
   * nothing was charged again.
   */
  repeated?: boolean;
  /**
   * A take or acquire made with an idempotency key: that key, which names this charge for a settlement
   * (limiter.settle). Absent without a key: such a take cannot be settled, only adjusted free-form.
   */
  charge?: string;
  /**
   * A policy with several limits: each limit's numbers, in the policy's order (absent for a policy of one
   * limit). `limit`, `remaining` and `resetAfterMs` above are the most constraining one's: on a refusal
   * the one that admits last, when allowed the one with the fewest tokens left; `retryAfterMs` is the
   * time until every limit admits the cost, `waitMs` the longest wait.
   */
  limits?: LimitDecision[];
  /**
   * This key's numbers are a runtime change's (limiter.setLimits, setPolicyLimits), not the policy's:
   * each limit's capacity and refill in force, in the policy's order. `limit`, `remaining`,
   * `resetAfterMs` and `limits` above are under these numbers, and so are the RateLimit headers.
   */
  limitsInForce?: readonly LimitNumbers[];
}

/**
 * The store did not answer: the policy's onStoreError chose `allowed`. The store gave no remaining count
 * or reset time, so those are absent rather than guessed.
 */
export interface StoreErrorDecision extends DecisionBase {
  reason: 'store_error';
  remaining?: undefined;
  resetAfterMs?: undefined;
  limits?: undefined;
  repeated?: undefined;
  charge?: undefined;
  limitsInForce?: undefined;
}

/**
 * One decision. `reason` tells the two kinds apart: `if (d.reason !== 'store_error')` narrows
 * `remaining` and `resetAfterMs` to numbers.
 */
export type Decision = BucketDecision | StoreErrorDecision;
