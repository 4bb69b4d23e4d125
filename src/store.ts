// The one interface every store implements. A store knows nothing of policies: the limiter hands it
// the multiplied-out step (see core/gcra.ts) and the store runs it atomically against its own clock.
import type { LimitStep, StepArgs, StepResult } from './core/gcra.js';
import type { OverrideArgs, OverrideLimit, OverrideRecord, OverrideResult, PolicyOverride, StepBase } from './core/override-types.js';

export type { OverrideArgs, OverrideLimit, OverrideRecord, OverrideResult, PolicyOverride, StepArgs, StepBase, StepResult };

/** What the limiter tells a store about one call's deadline. */
export interface StepOptions {
  /**
   * Aborted when the limiter stops waiting for this call (its timeoutMs has passed). A store should
   * cancel the call's I/O: the limiter has already answered per the fail mode and freed the call's slot.
   * The limiter makes the signal when it is first read, so a store whose client cannot take one
   * should not read it.
   */
  signal?: AbortSignal;
  /** The limiter's bound on this call, in ms, for clients that take a per-operation timeout instead. */
  timeoutMs?: number;
}

/** Where buckets live: one atomic, store-clocked step per decision. memoryStore, redisStore, mongoStore and durableObjectStore implement it. */
export interface Store {
  /** Short name for logs, errors and /healthz: 'memory', 'redis', 'mongodb'. */
  readonly name: string;
  /**
   * One atomic GCRA step on `key`, timed by the store's clock. With `costMs === 0` it only reads.
   * `key` is the full storage key ({prefix}{policy}:{key}), always a non-empty string.
   */
  step(key: string, args: StepArgs, options?: StepOptions): Promise<StepResult>;
  /** Forgets the bucket: it is full again. The key's override record (Store.override) is kept. */
  reset(key: string): Promise<void>;
  /**
   * Changes the key's override record (core/override-types.ts) in one atomic step on the store's clock:
   * numbers set or cleared, a block set or lifted, the bucket carried from the numbers in force before to
   * those after (core/override.ts applyOverride). With nothing to change it only reads. The record lives
   * beside the bucket and outlives it: it ends only when it expires or is cleared. Every built-in store
   * has it; a store without it cannot hold records, and then `step` need not read StepArgs.base.
   */
  override?(key: string, args: OverrideArgs, options?: StepOptions): Promise<OverrideResult>;
  /** Resolves when the store answers; rejects otherwise. Used by /healthz. */
  ping(): Promise<void>;
  /**
   * True for a store that does no I/O (memory): it cannot hang or fail for outside reasons, so the
   * limiter skips the timeout timer and circuit breaker around its calls.
   */
  readonly inProcess?: boolean;
  /** The same step, synchronously, for in-process stores: lets the limiter answer without an await. */
  stepSync?(key: string, args: StepArgs): StepResult;
  /**
   * For in-process stores: `stepSync(prefix + key, { limits: [limit] })`, a take on a policy of one
   * limit (limit.costUnits above 0), answered as core/gcra.ts `takeUnits` does, with no object made:
   * the limit's debt after the take when allowed, or -1 - its debt now when refused. The limiter's hot
   * path (a take of one token with no wait) uses it when the store has it, with the policy's key prefix
   * and the caller's key: the bucket is the one of the storage key `prefix + key`, however it is split
   * (the memory store finds it by the two parts without building that string). NaN when the key has an
   * override record: nothing was taken, and the caller steps with stepSync (with StepArgs.base), whose
   * result says which numbers were in force. A caller that sees a policy-wide change (StepArgs.policy)
   * steps with stepSync instead. `seenUs`: the caller's StepArgs.policySeenUs; NaN also when the bucket
   * was last written before it (stepSync then counts its refill from it: core/override.ts missedBefore).
   */
  takeOneSync?(prefix: string, key: string, limit: LimitStep, seenUs?: number): number;
  /**
   * Releases what the store owns, such as a client it was given to close (redisStore's and mongoStore's
   * `closeClient`). The limiter's `close()` calls it last. Absent when the store owns nothing to release.
   */
  close?(): Promise<void>;
}
