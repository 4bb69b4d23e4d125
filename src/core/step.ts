// What one atomic store step is given and answers (StepArgs, StepResult), and what a store records for
// an operation id (OpRecord): a repeat's answer, a charge's units, and a settlement's adjustment.
// core/gcra.ts runs the step; every store keeps the records.

import type { OverrideLimit, PolicyOverride, StepBase } from './override-types.js';

/** One limit's part of a step, multiplied out so that stores do no policy math. */
export interface LimitStep {
  /**
   * Debt this step adds to the limit: cost * tokenUnits. In a take, at least 0 (0: this limit is not
   * charged, and not checked); in an adjustment (StepArgs.adjust), below 0 a refund.
   */
  readonly costUnits: number;
  /** The largest debt allowed after the step: capacityUnits plus maxWaitMs of refill (an adjustment's cap). */
  readonly limitUnits: number;
  /** Units refilled per µs of the store's clock (ResolvedLimit.refillUnitsPerUs). */
  readonly refillUnitsPerUs: number;
}

/**
 * What one atomic store step needs. Stores only read it: the limiter passes one shared object for every
 * take of one token with no wait.
 */
export interface StepArgs {
  /** One entry per limit of the policy, in the policy's order; the stored bucket holds one debt each. */
  readonly limits: readonly LimitStep[];
  /**
   * Absent or false: a take, all or nothing (every cost at least 0; every cost 0: a peek, read only,
   * never written). True: an adjustment, always applied: each limit's debt moves by its cost, a refund
   * never below 0 (a bucket is never fuller than full) and a charge never above limitUnits (a debt
   * already above it is kept, not lowered).
   */
  readonly adjust?: boolean;
  /**
   * Partial grant (token leases, a policy of one limit): take the largest whole number of tokens of
   * tokenUnits each that fits under limitUnits, at most costUnits / tokenUnits of them; denied only when
   * not even one fits. The result's `tokens` says how many were taken. Absent: all or nothing.
   */
  readonly tokenUnits?: number;
  /**
   * With an adjustment: the store clock's reading, in whole µs, of the step that took the tokens being
   * given back (StepResult.atUs of a lease grant). A refund is then what the bucket has not refilled
   * since, reckoned at the store's clock when the refund is applied:
   * max(0, −costUnits − (nowUs − refundSinceUs) × refillUnitsPerUs). So a refund that reaches the store
   * late (queued behind others, a paused server) never gives back tokens the bucket has refilled meanwhile.
   */
  readonly refundSinceUs?: number;
  /**
   * An operation id (a client's Idempotency-Key), applied at most once per bucket key: in the same
   * atomic step, a store that holds a record of this id for this key (younger than its ttlMs by the
   * store's clock) changes nothing and answers the recorded result with `repeated: true` (with
   * `conflict: true` instead when the record's fingerprint differs: the id was used for another
   * request); otherwise it steps and records the result for ttlMs.
   */
  readonly op?: OpArgs;
  /**
   * The numbers `limits` were multiplied out from (the limiter sends it on every step): a store redoes
   * the step under a key's override record with it (core/override.ts). A custom store may ignore it
   * only if it never holds records.
   */
  readonly base?: StepBase;
  /**
   * The policy-wide change this limiter node sees (absent: none): installed on a key with no record of
   * its own, unless the key holds a newer one (core/override.ts changeVersion).
   */
  readonly policy?: PolicyOverride;
  /**
   * Without `policy`: the version (core/override.ts changeVersion: a store clock reading in whole µs) of
   * the policy-wide record this node last read with no change in force: a revert's marker, or a change
   * that has ended; 0 when there was none. A step that moves a key to the policy's numbers also counts
   * them from then, where that leaves fewer tokens. (A node that knows a change's end, having held it or
   * read it as stored, sends it, ended, as `policy`: a step then counts from its end.) A key's copy or marker of that version or newer is newer than
   * this node's view, and stays (the step decides under it); an older copy goes, and the marker
   * "<policySeenUs>." takes its place, so that no node whose view is older installs it again. Absent:
   * this node has no view, the oldest: the key keeps what it holds.
   */
  readonly policySeenUs?: number;
  /**
   * How long, in ms, a key's copy of a policy-wide change or marker that this step writes is kept at
   * least, even with its bucket full: as long as another node may still hold an older view (the
   * limiter sends the longest policyRefreshMs + the longest timeoutMs + 50, 120050, whatever its own
   * settings). Absent: 0.
   */
  readonly policyHoldMs?: number;
  /**
   * A settlement of a charge: the take recorded under operation id `chargeId` on this key (a take with
   * an idempotency key). Each limit's costUnits is then the ACTUAL cost in units, at least 0; in the
   * same atomic step the store finds the charge's record (OpRecord.chargedUnits) and applies the
   * adjustment `settledArgs` makes: per limit, actual - charged, so that a refund is at most what the
   * charge took. Always with `adjust: true` and the settlement's own `op` (SETTLE_OP + chargeId), so it
   * applies once. No live record of a take under chargeId (never made, expired, or an adjustment's):
   * nothing changes and nothing is recorded, and the result says `unknownCharge: true`.
   */
  readonly settle?: { readonly chargeId: string };
}

/**
 * The operation id of a charge's settlement: SETTLE_OP + the charge's id. U+0001 is no printable ASCII,
 * so no idempotency key (TakeOptions.idempotencyKey) is ever a settlement's id, and no settlement's
 * record is ever taken for a charge.
 */
export const SETTLE_OP = '\u0001settle:';

/** An idempotent step's id (StepArgs.op). */
export interface OpArgs {
  /** The id: 1 to 256 bytes of UTF-8. */
  readonly id: string;
  /** How long the store keeps the id's answer, in ms of its clock. */
  readonly ttlMs: number;
  /** What the operation asks (its kind, costs and wait): a repeat asking something else is a conflict. */
  readonly fingerprint: string;
}

/** What every store returns from one atomic step. */
export interface StepResult {
  allowed: boolean;
  /** Each limit's debt after the step when allowed; the unchanged debts when denied or peeking. In units. */
  debtUnits: number[];
  /** With StepArgs.tokenUnits: the tokens taken (0 when denied). */
  tokens?: number;
  /**
   * The store clock's reading at this step, in whole µs, where the store reports it (every built-in
   * store does): a lease refund passes a grant's as StepArgs.refundSinceUs. A custom store that reports
   * it must honour refundSinceUs; one that does not report it gets refunds already decayed instead.
   */
  atUs?: number;
  /**
   * With StepArgs.op: this id was applied before, nothing changed, and this is the recorded result (its
   * allowed, debtUnits, tokens and atUs as they were then).
   */
  repeated?: boolean;
  /**
   * With StepArgs.op: this id was applied before to another request (another fingerprint); nothing
   * changed (debtUnits then says nothing: a store may leave it empty).
   */
  conflict?: boolean;
  /**
   * The key is blocked until this store clock reading (whole µs). A take (a peek, a reservation, a lease
   * grant) is then refused and nothing written; an adjustment (StepArgs.adjust: a charge, a refund, a
   * settlement) is applied as without the block, and its result says the key is blocked all the same.
   */
  blockedUntilUs?: number;
  /** Present when the numbers in force were a record's: each limit's, and debtUnits are in their units. */
  limits?: OverrideLimit[];
  /** With StepArgs.settle: the charge has no live record on this key; nothing changed or was recorded. */
  unknownCharge?: boolean;
}

/** What a store records for an operation id: the step's result and the request's fingerprint. */
export interface OpRecord {
  allowed: boolean;
  debtUnits: number[];
  tokens?: number;
  atUs: number;
  fingerprint: string;
  /**
   * A take's record (a charge): the units it charged each limit (chargedUnitsOf: 0 each when refused).
   * A settlement's record: the units of the charge it settled (how a repeat's step is redone). Absent
   * from an adjustment's record: no charge to settle.
   */
  chargedUnits?: number[];
  /** The step ran under a key's override record: its numbers (StepResult.limits), so that a repeat is read in them. */
  limits?: OverrideLimit[];
  /** The key was blocked at the step (StepResult.blockedUntilUs): a take refused, an adjustment applied. */
  blockedUntilUs?: number;
}

/** The units a take charged each limit (its OpRecord.chargedUnits): its costs when allowed (a grant's tokens), else 0 each. */
export function chargedUnitsOf(args: StepArgs, result: StepResult): number[] {
  if (!result.allowed) return args.limits.map(() => 0);
  if (result.tokens !== undefined) return [result.tokens * args.tokenUnits!];
  return args.limits.map((l) => Math.max(0, l.costUnits));
}

/**
 * A settlement's adjustment (StepArgs.settle), once the store has read its charge's chargedUnits: per
 * limit actual - charged, under adjust's rules (a refund never fuller than full, a charge up to
 * limitUnits). The actual costs are at least 0, so a refund is never more than the charge took.
 */
export function settledArgs(args: StepArgs, chargedUnits: readonly number[]): StepArgs {
  const { settle: _settled, ...rest } = args;
  return { ...rest, limits: args.limits.map((l, i) => ({ ...l, costUnits: l.costUnits - (chargedUnits[i] ?? 0) })), adjust: true };
}

/** The answer a store gives for a recorded operation id: the result as recorded, or a conflict. */
export function repeatOf(record: OpRecord, args: StepArgs): StepResult {
  if (record.fingerprint !== args.op!.fingerprint) return { allowed: false, debtUnits: record.debtUnits, atUs: record.atUs, conflict: true };
  const r: StepResult = { allowed: record.allowed, debtUnits: record.debtUnits, atUs: record.atUs, repeated: true };
  if (record.tokens !== undefined) r.tokens = record.tokens;
  if (record.limits !== undefined) r.limits = record.limits;
  if (record.blockedUntilUs !== undefined) r.blockedUntilUs = record.blockedUntilUs;
  return r;
}
