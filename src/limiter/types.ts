// The limiter's public types: its options, the options of one call, the Limiter itself, its stats and the
// event its onDecision hook receives. The one place they are defined; src/limiter.ts re-exports them.
import type { Costs } from '../core/gcra.js';
import type { Decision, LimitNumbers } from '../core/decision.js';
import type { Cost } from '../core/key.js';
import type { FailMode, PolicyConfig, ResolvedPolicy } from '../core/policy.js';
import type { Store } from '../store.js';
import type { CircuitBreakerOptions, CircuitState } from './breaker.js';
import type { WaitUntil } from './lease.js';
import type { LimitsInput } from './limits-input.js';
import type { StoreStatusEvent } from './store-call.js';

export type { CircuitBreakerOptions, CircuitState, LimitNumbers, LimitsInput, StoreStatusEvent, WaitUntil };

/** What the onDecision hook receives after every decision: the policy, key, cost and operation, the Decision, and the store call's duration. */
export interface DecisionEvent {
  policy: string;
  key: string;
  /** Tokens charged: one number for every limit, or per limit in the policy's order (0 for a peek). */
  cost: Costs;
  /** 'take', 'acquire', 'peek', 'adjust' or 'settle' (cost: the actual cost given). */
  op: 'take' | 'acquire' | 'peek' | 'adjust' | 'settle';
  decision: Decision;
  /** Wall time of the store call, in ms. */
  durationMs: number;
  /** The store error, when reason is 'store_error'. */
  error?: unknown;
}

/**
 * What the onAudit hook receives after every administrative action: a reset, a free-form adjustment
 * (adjust without a charge), and the runtime limits, blocks and unblocks. One event per action, after
 * the store answered (`error` set when it did not, and the action may not have been applied). It holds
 * no secret: `actor` is a name the caller passes (the permit endpoint passes its token's name), never a
 * token.
 */
export interface AuditEvent {
  /**
   * 'reset', 'adjust' (a free-form adjustment), or an action on runtime limits ('limits', 'block',
   * 'unblock'); a string, so that a later action needs no new version of the type.
   */
  action: AuditAction;
  policy: string;
  key: string;
  /** Who did it, as the call's AdminOptions.actor named them (absent when the call named no one). */
  actor?: string;
  /**
   * The state before the action: a runtime limit's old value; for 'reset' and 'adjust', `{ remaining }`
   * as a peek read it just before the action (not in the action's own store step: a take by another
   * caller in between shows in neither), absent when the store did not answer that peek.
   */
  before?: unknown;
  /**
   * What the action left or set: for 'adjust', `{ cost, remaining }` (the cost as given, and the bucket's
   * remaining tokens right after; `repeated: true` too when its idempotency key was applied before and
   * nothing changed now); for 'reset', `{ remaining }` (the policy's capacity: full).
   */
  after?: unknown;
  /** When the action was answered: wall clock, ms since the epoch (Date.now()). */
  atMs: number;
  /**
   * The error, when the action failed after it reached the store (it did not answer: the action may or
   * may not have been applied; or it refused it, as an idempotency conflict). Input refused before any
   * store call (an InvalidInputError, an unknown policy) is no action and makes no event.
   */
  error?: unknown;
}

/** AuditEvent.action: the built-in actions, or another library part's own. */
export type AuditAction = 'reset' | 'adjust' | 'limits' | 'block' | 'unblock' | 'policy-limits' | (string & {});

/** Options of an administrative call (reset, free-form adjust): who does it, for the onAudit hook. */
export interface AdminOptions {
  /** A name for the one doing it (the permit endpoint passes its token's name, never its secret). Goes to AuditEvent.actor. */
  actor?: string;
}

/** Options of createLimiter: the store, the policies, and how store calls are bounded, broken off and reported. */
export interface LimiterOptions<P extends string = string> {
  /** Where buckets live. */
  store: Store;
  /** Named policies; validated now, and an invalid one throws a ConfigError naming the field. */
  policies: Record<P, PolicyConfig>;
  /** Prefix of every store key: `{prefix}{policy}:{key}`. @default 'el:' */
  prefix?: string;
  /** Bound on one store call, in ms, unless a policy sets its own. @default 1000 */
  timeoutMs?: number;
  /** Outcome when the store fails, unless a policy sets its own. @default 'deny' */
  onStoreError?: FailMode;
  /**
   * How many nodes share the store. A policy with onStoreError 'local' and no `local` block falls back to
   * its own numbers divided by this, so that during an outage the nodes together admit about what the
   * policy does (at most nodes × (local capacity + local rate × outage length)). An integer from 1 to
   * 100000. @default 1
   */
  expectedNodes?: number;
  /** Hook called after every decision, e.g. for a structured log line. Off by default. Errors it throws are ignored. */
  onDecision?: (event: DecisionEvent) => void;
  /**
   * Hook called after every administrative action (reset, free-form adjust; see AuditEvent), e.g. for
   * an audit log line. Off by default. Errors it throws are ignored, as onDecision's are.
   */
  onAudit?: (event: AuditEvent) => void;
  /** Fail fast while the store is down. `false` disables it. @default { failureThreshold: 5, cooldownMs: 500 } */
  circuitBreaker?: CircuitBreakerOptions | false;
  /**
   * Remember denials on this node and answer them locally until their retryAfterMs has passed, without a
   * store call; `remaining` and `resetAfterMs` of such an answer are recomputed from the time elapsed.
   * Measured on this node's monotonic clock (relative time), so clock skew cannot affect it, and it can
   * only deny what the store would deny.
   *
   * Trade-off: a `reset`, a refill or a change of limits made through another node is not seen on this
   * node while the refusal is cached: until its retryAfterMs has passed, and never longer than
   * `policyRefreshMs` (a refusal is cached at most that long, then the store decides again). `reset`
   * and runtime changes through this limiter clear its own entry.
   * @default false
   */
  denyCache?: boolean | { maxKeys?: number };
  /**
   * Most store calls in flight at once. A call stops counting when it settles or when its timeoutMs
   * passes (its I/O is then aborted through the signal passed to `Store.step`), so a store whose calls
   * never settle cannot lock the limiter. Beyond it, decisions fail at once per onStoreError.
   * @default 1024
   */
  maxPendingStoreCalls?: number;
  /**
   * Called once when decisions start failing because of the store (timeouts, errors, open circuit) and
   * once when the store decides again: one log line per outage, not one per request. Errors it throws
   * are ignored.
   */
  onStoreStatus?: (event: StoreStatusEvent) => void;
  /**
   * Bounds the token leases of policies that opt in (PolicyConfig.lease): at most this many keys hold a
   * lease on this node; beyond it the oldest lease gives its tokens back. @default { maxKeys: 10000 }
   */
  leases?: { maxKeys?: number };
  /**
   * How long the store remembers an idempotency key (TakeOptions.idempotencyKey, an adjust's), in ms of
   * its clock: a retry within it gets the first answer and is not charged again. From 1000 to 86400000.
   * @default 300000 (5 minutes)
   */
  idempotencyWindowMs?: number;
  /**
   * How often this node reads a policy's policy-wide change (setPolicyLimits), in ms: its decisions never
   * use a reading older than this, so a change made through any node is obeyed everywhere within
   * policyRefreshMs plus one store round trip. A reading is one store read per policy per node, made in
   * the background while decisions come (none on an idle node). From 10 to 60000. @default 1000
   */
  policyRefreshMs?: number;
  /** Monotonic clock in ms for timeouts, the breaker, the deny cache and leases. Tests pass a fake one. @default performance.now */
  monotonicMs?: () => number;
}

/** Options of limiter.take: the cost, how long a reservation may wait, an idempotency key, and where background lease calls go. */
export interface TakeOptions {
  /**
   * Tokens to take: an integer from 1 to the policy's capacity (every limit of a policy with several
   * pays it), or per limit, `{ requests: 1, tokens: 1200 }` (a limit not named pays 0). @default 1
   */
  cost?: Cost;
  /** Reserve if the tokens will exist within this many ms; the decision's waitMs says how long to wait. @default 0 */
  maxWaitMs?: number;
  /**
   * Applies this take at most once per key within the limiter's idempotencyWindowMs: a take with the
   * same key again (a client's retry) gets the first answer, `repeated: true`, and charges nothing; the
   * same key with another cost or wait is an IdempotencyConflictError. The store records it in the same
   * atomic step (such a take always goes to the store: no lease or deny cache answers it). 1 to 256
   * printable ASCII characters (space to `~`), as the Idempotency-Key header carries them. Off by default.
   */
  idempotencyKey?: string;
  /**
   * Where background store calls are handed to the runtime: token leases' refills and refunds, and a
   * reading of the policy-wide change started in the background. On Workers pass
   * `ctx.waitUntil.bind(ctx)` (the middleware and permit endpoint do), so they finish after the
   * response (a Worker cancels a request's I/O when it ends otherwise); a grant whose expiry will give
   * tokens back also keeps its request until then. Not needed on Node (an unref'd timer gives aged
   * grants back).
   */
  waitUntil?: WaitUntil;
}

/** Options of limiter.adjust: an idempotency key, and who does it (onAudit). */
export interface AdjustOptions extends AdminOptions {
  /** Applies the adjustment at most once per key within the limiter's idempotencyWindowMs (see TakeOptions.idempotencyKey). */
  idempotencyKey?: string;
}

/** Options of limiter.settle: the charge settled and its actual cost. */
export interface SettleChargeOptions {
  /** The charge: the idempotency key of the take or acquire being settled (its Decision's `charge`). */
  charge: string;
  /** What the work really cost: at least 0 per limit, a number (every limit) or per limit (0 where not named). */
  cost: Cost;
}

/** Options of limiter.acquire: the cost, the longest wait, an abort signal and an idempotency key. */
export interface AcquireOptions {
  /** As TakeOptions.cost. @default 1 */
  cost?: Cost;
  /** As TakeOptions.idempotencyKey: a retried acquire gets the first reservation, not a second. */
  idempotencyKey?: string;
  /** The longest acceptable wait, in ms. @default 30000 */
  timeoutMs?: number;
  /** Aborts the wait. A reservation already made is then forfeited (its tokens stay taken). */
  signal?: AbortSignal;
  /** See TakeOptions.waitUntil. */
  waitUntil?: WaitUntil;
}

/** The limiter createLimiter returns: each method is one decision (or read) in one bounded store call, answered as a Decision. */
export interface Limiter<P extends string = string> {
  /** One decision; consumes tokens only when allowed. Rejects with InvalidInputError/UnknownPolicyError on bad input. */
  take(policy: P, key: string, options?: TakeOptions): Promise<Decision>;
  /** Reserves a slot in one store call, then sleeps until it is due. Rejects with AcquireTimeoutError (nothing consumed) if it would wait longer than timeoutMs. */
  acquire(policy: P, key: string, options?: AcquireOptions): Promise<Decision>;
  /** The bucket's state now; consumes nothing. */
  peek(policy: P, key: string): Promise<Decision>;
  /**
   * A free-form adjustment, the administrative path: any amount, tied to no charge (limiter.settle is
   * the bounded one), and onAudit hears of it. In one atomic store call on the store's clock: below 0 a
   * refund (never fuller than full), above 0 a charge, which may put a limit into debt (up to one hour
   * of its refill beyond empty; later takes then wait until it is repaid). `cost` is a number (every
   * limit) or per limit, `{ tokens: -300 }`. Resolves with the bucket as `peek` reads it right after
   * (allowed: a take of 1 would pass now); rejects with StoreError when the store fails.
   */
  adjust(policy: P, key: string, cost: Cost, options?: AdjustOptions): Promise<Decision>;
  /**
   * Settles a charge: the take or acquire made on this policy and key with idempotency key
   * `options.charge` (its Decision's `charge`), by what the work really cost, `options.cost` (at least 0
   * per limit: a number for every limit, or per limit, a limit not named costing 0). In one atomic store
   * step it reads what the charge took and applies the difference: a refund of at most that (never
   * fuller than full), or a charge of the excess, as adjust charges. Once: settling it again answers
   * the first settlement (`repeated: true`) and changes nothing; again with another cost, an
   * IdempotencyConflictError (field `charge`). A charge the store holds no record of (no such take
   * here, or older than idempotencyWindowMs) is an UnknownChargeError. Resolves with the bucket as
   * `peek` reads it right after; rejects with StoreError when the store fails (nothing may have been
   * applied: settling again with the same cost is safe).
   */
  settle(policy: P, key: string, options: SettleChargeOptions): Promise<Decision>;
  /** Refills the bucket. An administrative action: onAudit hears of it. */
  reset(policy: P, key: string, options?: AdminOptions): Promise<void>;
  /**
   * Sets the key's own numbers in the store, beside its bucket, until `expiresInMs` has passed (absent:
   * until cleared): every node's next decision on the key uses them, in the same atomic step as the
   * bucket. `limits` is written as the policy's limits are (`{ capacity, refillPerSecond }`, or for a
   * policy with several `{ limits: { day: { capacity, refill } } }`, naming some or all; the others keep
   * the policy's numbers); an InvalidInputError names a bad field. Tokens spent stay spent: the bucket's
   * whole debt is carried over (rounded against the caller), whatever the new capacity. Wins over a
   * policy-wide change. Resolves with the key's limits after; onAudit hears of it ('limits').
   */
  setLimits(policy: P, key: string, limits: LimitsInput, options?: SetLimitsOptions): Promise<KeyLimits>;
  /** The key's numbers in force now, where they come from, and its block. One store read. */
  getLimits(policy: P, key: string): Promise<KeyLimits>;
  /** Drops the key's own numbers: the policy's (or a policy-wide change's) apply again, the debt carried back. */
  clearLimits(policy: P, key: string, options?: AdminOptions): Promise<KeyLimits>;
  /**
   * Refuses every take on the key for `forMs` (reason 'blocked', retryAfterMs until it ends), whatever
   * its bucket holds, on every node; this node's lease of the key is given back at once. A block is kept
   * beside the bucket with the key's numbers; it ends when forMs has passed on the store's clock, or at unblock.
   */
  block(policy: P, key: string, options: BlockOptions): Promise<KeyLimits>;
  /** Ends the key's block now. */
  unblock(policy: P, key: string, options?: AdminOptions): Promise<KeyLimits>;
  /**
   * Changes the policy's numbers for every key without numbers of its own, until `expiresInMs` (absent:
   * until cleared). Nodes read it at most every policyRefreshMs: it is obeyed everywhere within that
   * plus one store round trip (at once on this node). onAudit hears of it ('policy-limits', key '*').
   */
  setPolicyLimits(policy: P, limits: LimitsInput, options?: SetLimitsOptions): Promise<PolicyLimits>;
  /** The policy-wide change in force now, if any. One store read. */
  getPolicyLimits(policy: P): Promise<PolicyLimits>;
  /** Ends the policy-wide change: keys go back to the policy's numbers within the same bound. */
  clearPolicyLimits(policy: P, options?: AdminOptions): Promise<PolicyLimits>;
  /** The validated policy, or undefined. */
  policy(name: string): ResolvedPolicy | undefined;
  readonly policies: ReadonlyMap<string, ResolvedPolicy>;
  readonly store: Store;
  /** Store calls in flight now, the most allowed, the breaker state, and the tokens held in leases. */
  stats(): LimiterStats;
  /**
   * Gives every token held in a lease back to the store (what the bucket has not refilled since its
   * grant; 32 refunds at a time, outside maxPendingStoreCalls) and waits for those calls and for the
   * grants in flight; then closes the store, if it has a close() (a redisStore or mongoStore made with
   * `closeClient: true` closes its client, so a Node script can exit). Call it when the process shuts
   * down; afterwards leased policies go to the store on every decision.
   */
  close(): Promise<void>;
}

/** What limiter.stats() reports about this node: store calls in flight, the circuit, token leases and local fallback buckets. */
export interface LimiterStats {
  /** Store calls started and neither settled nor timed out. */
  pendingStoreCalls: number;
  /** The maxPendingStoreCalls option: at it, decisions fail without calling the store. */
  maxPendingStoreCalls: number;
  circuit: CircuitState;
  /** Keys holding a token lease on this node, and the tokens they hold. */
  leases: { keys: number; tokens: number };
  /** Keys with a local fallback bucket on this node (onStoreError 'local'; 0 while the store answers). */
  localKeys: number;
}

/** The limits in force for a key (or, for a policy-wide change, for every key without its own). */
export interface LimitsState {
  /** Each limit's numbers, in the policy's order. */
  limits: LimitNumbers[];
  /**
   * Where they come from: `policy` (the configured ones), `key` (setLimits on this key) or
   * `policy-wide` (setPolicyLimits; a key's own numbers win over it).
   */
  source: 'policy' | 'key' | 'policy-wide';
  /** Ms until the numbers end and the policy's apply again (absent: until cleared, or the policy's own). */
  expiresInMs?: number;
  /** Ms until the key's block ends (absent: not blocked). */
  blockedForMs?: number;
}

/** A key's limits as they are now (limiter.getLimits, and the answer of every change to a key). */
export interface KeyLimits extends LimitsState {
  policy: string;
  key: string;
  /** A change's answer: the state it replaced, as read in the same atomic store step. */
  previous?: LimitsState;
}

/** A policy-wide change as it is now (limiter.getPolicyLimits, and the answer of setPolicyLimits and clearPolicyLimits). */
export interface PolicyLimits extends LimitsState {
  policy: string;
  /** A change's answer: the state it replaced. */
  previous?: LimitsState;
}

/** Options of setLimits and setPolicyLimits: when the numbers end, and who sets them. */
export interface SetLimitsOptions extends AdminOptions {
  /** The numbers end this many ms after the store applies them (an integer from 1 to 400 days); absent: until cleared. */
  expiresInMs?: number;
}

/** Options of block: how long, and who blocks. */
export interface BlockOptions extends AdminOptions {
  /** How long the key is refused, in ms of the store's clock: an integer from 1 to 400 days. */
  forMs: number;
}
