// The shapes of a runtime change of a key's limits (an override record, stored beside the bucket) and of
// the operations on it. Types only: core/gcra.ts (the step's arguments and result) and core/override.ts
// (the arithmetic) both read them, so they live apart from either.

/**
 * One limit's numbers, as a ResolvedLimit holds them: integers, one token is `tokenUnits` units, the
 * bucket holds `capacityUnits` (capacity * tokenUnits) and one µs of the store's clock refills
 * `refillUnitsPerUs` units.
 */
export interface OverrideLimit {
  readonly tokenUnits: number;
  readonly capacityUnits: number;
  readonly refillUnitsPerUs: number;
}

/**
 * What a store keeps beside a bucket (one per bucket key, in the same atomic unit: the memory entry, the
 * Redis hash slot, the MongoDB document, the Durable Object) when its limits were changed at runtime.
 * The stored bucket's debts are in the record's numbers while they are live (see core/override.ts).
 */
export interface OverrideRecord {
  /**
   * The numbers in force instead of the base (the policy's), one per limit in the policy's order. A
   * record set for one limit of several carries every limit's numbers: stores never merge.
   */
  readonly limits?: readonly OverrideLimit[];
  /** The store clock's reading, in whole µs, at which `limits` end (absent: until cleared). */
  readonly untilUs?: number;
  /** The store clock's reading, in whole µs, until which the key is refused (absent: not blocked). */
  readonly blockedUntilUs?: number;
  /**
   * Set: `limits` is the policy-wide change of this id, installed on this key by a step (StepArgs.policy),
   * or on the policy's own record the change itself. The id starts with the change's version, then
   * the version it replaced and since when the policy's own numbers were in force up to it
   * ("<version>.<replaced>.<since>.<uuid>#<limit names>", override.ts changeVersion and priorOf), which
   * Store.override sets. Set without `limits`: a marker (override.ts isMarker).
   */
  readonly policyId?: string;
}

/**
 * The base numbers of a step (the ones its LimitSteps were multiplied out from), so that a store can
 * redo the step under a record's numbers: each limit's tokenUnits and capacityUnits (its refill is the
 * LimitStep's), and the wait the take may reserve (an adjustment: MAX_WAIT_MS; a refund or a grant: 0).
 */
export interface StepBase {
  readonly tokenUnits: readonly number[];
  readonly capacityUnits: readonly number[];
  readonly maxWaitMs: number;
}

/**
 * A policy-wide change as a limiter node sees it (StepArgs.policy): a step on a key whose record is
 * absent or was installed by a policy-wide change installs this one (per-key records win).
 */
export interface PolicyOverride {
  /** The change's id: a key whose record has this policyId already has it. */
  readonly id: string;
  readonly limits: readonly OverrideLimit[];
  /** The store clock's reading, in whole µs, at which the change ends (absent: until cleared). */
  readonly untilUs?: number;
}

/** Store.override's arguments: what to change in the key's record, and the base numbers to carry the bucket from or to. */
export interface OverrideArgs {
  /** The policy's numbers, one per limit: what the bucket is in without live record numbers. */
  readonly base: readonly OverrideLimit[];
  /** Set these numbers (one per limit); null: clear them (back to the base); absent: keep. */
  readonly limits?: readonly OverrideLimit[] | null;
  /** With `limits`: they end this many ms after the store's now (absent: until cleared). */
  readonly forMs?: number;
  /** Block the key for this many ms of the store's clock; null: unblock; absent: keep. */
  readonly blockForMs?: number | null;
  /**
   * With `limits`: the record is the policy-wide change of this id (the policy's own record, §5). The
   * store writes it after the change's version, `${max(nowUs, the version it replaces + 1)}.${policyId}`.
   */
  readonly policyId?: string;
  /**
   * Without policyId: the node's view of the policy-wide change, as a step sends it (StepArgs.policy,
   * .policySeenUs, .policyHoldMs). A change to a key's record then leaves what a step under this view
   * would (the change installed on a key without numbers of its own, an older copy replaced), and
   * carries the bucket as the step would. Absent: no view (the base).
   */
  readonly policy?: PolicyOverride;
  /** Without policy: the version of the policy-wide record the node last read with no change in force (StepArgs.policySeenUs). */
  readonly policySeenUs?: number;
  /** How long, in ms, a key's copy or marker this change writes is kept (StepArgs.policyHoldMs). */
  readonly policyHoldMs?: number;
}

/** What Store.override did: the record before and after (absent: none), at the store clock's reading atUs (whole µs). */
export interface OverrideResult {
  before?: OverrideRecord;
  after?: OverrideRecord;
  atUs: number;
  /**
   * A read (nothing to change) only: the record as stored, what has ended in it included (`after` drops
   * it). A policy-wide change that has ended still says its end there, from which its policy's own
   * numbers are in force. A store may leave it out (a node then knows only the ended change's version).
   */
  stored?: OverrideRecord;
}
