// Limits changed at runtime, in exact integer arithmetic. Pure: time is a parameter. A key's override
// record (core/override-types.ts) is stored beside its bucket and read in the same atomic step; every
// store runs `stepWithRecord` and `applyOverride` (or mirrors their lines, as the Redis scripts and the
// MongoDB pipeline do).
//
// The one invariant: a stored bucket (debts, atUs) is in the record's numbers when the record has
// `limits` and (`untilUs` is absent or atUs < untilUs), else in the base numbers (the policy's). Every
// write keeps it: a step writes atUs = now in the numbers live at now, and a change of numbers carries
// the bucket over in the same step. No tag is stored, so a key with no record keeps today's format.
//
// Carrying a debt d from numbers F to T: convertUnits(d, F.tokenUnits, T.tokenUnits, 'up') (exact, or
// rounded against the caller), whole: tokens spent stay spent, whatever the new capacity (90 spent of
// 100 moved to 50 leaves 0, and the next token comes once the debt has refilled below 50 at the new
// rate). No change of numbers, nor a change and its revert, nor two nodes that disagree about a
// policy-wide change for a while, can give back what was spent. A bucket in the record's numbers read at
// or after untilUs decays under the record's refill to untilUs, is carried to the base there, and
// decays under the base refill from untilUs: so an expiry is exact in both directions.
import { CALLER_LAG_US, debtAt, decayed, lagUnits, refundUnitsAt, stateAt, step, written, type BucketState, type LimitStep, type PolicyView, type StepArgs, type StepResult } from './gcra.js';
import { MAX_LIMIT_UNITS, type ResolvedLimit, type ResolvedPolicy } from './policy.js';
import { ceilDiv, convertUnits } from './units.js';
import type { OverrideArgs, OverrideLimit, OverrideRecord, OverrideResult, StepBase } from './override-types.js';
import { changeVersion, newerThanView, priorOf } from './policy-id.js';

export type { OverrideArgs, OverrideLimit, OverrideRecord, OverrideResult, PolicyOverride, StepBase } from './override-types.js';
export { policyUnder } from './policy-under.js';
export { changeVersion, isMarker, newerThanView, priorOf } from './policy-id.js';

/** A limit's numbers as an override holds them. */
export function numbersOf(limit: Pick<ResolvedLimit, 'tokenUnits' | 'capacityUnits' | 'refillUnitsPerUs'>): OverrideLimit {
  return { tokenUnits: limit.tokenUnits, capacityUnits: limit.capacityUnits, refillUnitsPerUs: limit.refillUnitsPerUs };
}

/** A policy's own numbers, one per limit: OverrideArgs.base. */
export function baseNumbers(policy: ResolvedPolicy): OverrideLimit[] {
  return policy.limits.map(numbersOf);
}

/** A step's base numbers, one per limit, from its LimitSteps (the refill) and StepArgs.base. */
export function stepBaseNumbers(limits: readonly LimitStep[], base: StepBase): OverrideLimit[] {
  return limits.map((l, i) => ({ tokenUnits: base.tokenUnits[i]!, capacityUnits: base.capacityUnits[i]!, refillUnitsPerUs: l.refillUnitsPerUs }));
}

/** Whether the record's numbers are live at tUs: set, and not ended. */
export function numbersLive(record: OverrideRecord | undefined, tUs: number): record is OverrideRecord & { limits: readonly OverrideLimit[] } {
  return record?.limits !== undefined && (record.untilUs === undefined || tUs < record.untilUs);
}

/** Whether the record's block is live at tUs. */
export function blockLive(record: OverrideRecord | undefined, tUs: number): boolean {
  return record?.blockedUntilUs !== undefined && record.blockedUntilUs > tUs;
}

/** The numbers in force at tUs, one per limit: the record's where live (limit by limit, where it has one), else the base. */
export function numbersAt(record: OverrideRecord | undefined, tUs: number, base: readonly OverrideLimit[]): readonly OverrideLimit[] {
  if (!numbersLive(record, tUs)) return base;
  const r = record.limits;
  return r.length === base.length ? r : base.map((b, i) => r[i] ?? b);
}

/**
 * Carries one debt (already decayed to the moment of the change, atUs) from numbers `from` to `to`,
 * whole (in `to`'s units, rounded up). With a reservation due after atUs (reservedUntilUs: the bucket's
 * horizon), at least as the bucket will stand then: its debt decayed under `from` to reservedUntilUs and
 * carried there, plus `to`'s refill until then. So reservations granted before the change keep their
 * times and count at `from`'s rate, and no admission under `to` comes before them or on top of them
 * (a change to a faster rate would otherwise count them at its rate, and admit that many more in a
 * window ending when they are due). With a reservation due less than 1 ms before the change, or after
 * it, `from`'s refill counted since the slots of the ms before is not (lagUnits).
 */
export function carryDebt(debtUnits: number, from: OverrideLimit, to: OverrideLimit, atUs = 0, reservedUntilUs = 0): number {
  // Reservations due in the ms before may have their callers still to come, under `to` (review 3, F6):
  // the refill counted to their tokens since their slots is not counted (lagUnits).
  if (reservedUntilUs > 0 && reservedUntilUs > atUs - CALLER_LAG_US) debtUnits += lagUnits(debtUnits, from, atUs, reservedUntilUs);
  const whole = convertUnits(debtUnits, from.tokenUnits, to.tokenUnits, 'up');
  if (!(reservedUntilUs > atUs)) return whole;
  const then = convertUnits(decayed(debtUnits, atUs, reservedUntilUs, from.refillUnitsPerUs), from.tokenUnits, to.tokenUnits, 'up');
  const held = Math.min(MAX_LIMIT_UNITS, (reservedUntilUs - atUs) * to.refillUnitsPerUs + then);
  return held > whole ? held : whole;
}

/** Whether two limits' numbers are the same (a record carries the policy's own for a limit it does not set): nothing to carry. */
const sameNumbers = (a: OverrideLimit, b: OverrideLimit) => a === b || (a.tokenUnits === b.tokenUnits && a.capacityUnits === b.capacityUnits && a.refillUnitsPerUs === b.refillUnitsPerUs);

/** Whether the record's numbers, in force at the bucket's reading, have ended by nowUs (debtsAt splits there). */
export function endedSince(state: BucketState | undefined, nowUs: number, record: OverrideRecord | undefined): boolean {
  return state !== undefined && numbersLive(record, state.atUs) && record.untilUs !== undefined && nowUs >= record.untilUs;
}

/**
 * A stored bucket's debts at nowUs, one per limit: each decayed under the numbers it is in, with the
 * expiry split when the record's numbers ended since (endedSince: decay under the record's refill to
 * untilUs, carry to `after` there, the key's numbers from its record's end (see carried), decay under
 * `after`'s refill from untilUs). The debts are in `after` after a split, else in numbersAt(nowUs).
 */
export function debtsAt(state: BucketState | undefined, nowUs: number, base: readonly OverrideLimit[], record: OverrideRecord | undefined, after: readonly OverrideLimit[] = base): number[] {
  const n = base.length;
  const out = new Array<number>(n);
  if (state === undefined) return out.fill(0);
  const from = numbersAt(record, state.atUs, base);
  const untilUs = record?.untilUs;
  const split = endedSince(state, nowUs, record);
  for (let i = 0; i < n; i++) {
    const d = state.debtUnits[i] ?? 0;
    const f = from[i]!;
    const a = after[i]!;
    if (!split || sameNumbers(f, a)) out[i] = decayed(d, state.atUs, nowUs, f.refillUnitsPerUs);
    else out[i] = decayed(carryDebt(decayed(d, state.atUs, untilUs!, f.refillUnitsPerUs), f, a, untilUs, state.reservedUntilUs), untilUs!, nowUs, a.refillUnitsPerUs);
  }
  return out;
}

/**
 * A bucket's debts at nowUs carried to `to`; numbers ended since go at their end to `viewed` (made by
 * then) or the base. With the step's `view` of the policy-wide change, a move to the numbers of `viewed`
 * (another change's copy, a marker, numbers that ended) is also counted from when they came in force
 * (a change's version, a revert's, StepArgs.policySeenUs, or the end of the view's change when it has
 * ended), with nothing refilled between the bucket's numbers and then (what was in force there is
 * unknown to a step), and each limit keeps the greater debt: a change reaches a key no later than it
 * was made where that leaves fewer tokens (reservations due before the key's next step count under
 * it), and numbers that ended before the change now seen was made never refill under numbers this step
 * does not know of.
 */
function carried(state: BucketState | undefined, nowUs: number, base: readonly OverrideLimit[], record: OverrideRecord | undefined, viewed: OverrideRecord | undefined, to: readonly OverrideLimit[], view?: PolicyView): number[] {
  const ended = endedSince(state, nowUs, record);
  const v = numbersAt(viewed, nowUs, base);
  const after = ended && v !== base && changeVersion(viewed!.policyId) <= record!.untilUs! ? v : base;
  const debts = carryAll(debtsAt(state, nowUs, base, record, after), ended ? after : numbersAt(record, nowUs, base), to, nowUs, state?.reservedUntilUs);
  if (state === undefined || view === undefined) return debts;
  const moved = ended || viewed?.policyId !== record?.policyId;
  const change = view.policy;
  const sinceUs = change ? 0 : (view.policySeenUs ?? 0);
  // (A change the view holds that has ended, and whose copy `viewed` is: in force from its end.)
  const endUs = change?.untilUs !== undefined && change.untilUs <= nowUs && viewed?.policyId === change.id ? change.untilUs : 0;
  const copyMissed = missedBefore(state, record, view, moved);
  const missed = endUs > state.atUs || copyMissed;
  if (!moved && !missed) return debts;
  // Numbers that ended run to their end; a copy of a change that the record seen replaced before its end,
  // only to that record's version (review 12, F1), and one replaced by what the step does not know, to
  // the bucket's reading.
  const t0 = !ended ? state.atUs : record!.policyId === undefined ? record!.untilUs! : copyMissed ? state.atUs : record!.policyId === viewed?.policyId ? record!.untilUs! : Math.min(record!.untilUs!, Math.max(state.atUs, changeVersion(viewed?.policyId)));
  const w = Math.min(nowUs, Math.max(t0, sinceUs, changeVersion(viewed?.policyId), endUs));
  const from = numbersAt(record, state.atUs, base);
  const h = state.reservedUntilUs;
  return debts.map((d, i) => {
    const [f, x, t] = [from[i]!, v[i]!, to[i]!];
    const a = decayed(state.debtUnits[i] ?? 0, state.atUs, ended || missed ? t0 : w, f.refillUnitsPerUs);
    let k = decayed(sameNumbers(f, x) ? a : carryDebt(a, f, x, w, h), w, nowUs, x.refillUnitsPerUs);
    if (!sameNumbers(x, t)) k = carryDebt(k, x, t, nowUs, h);
    return k > d ? k : d;
  });
}

/**
 * Whether a key's numbers at its bucket's reading did not run up to the record the step's view is of,
 * so that what was in force between is unknown to the step (and it refills nothing there, see carried):
 * a key in the policy's numbers (none of its own, no live copy) read before the policy's numbers were
 * last in force up to it (a change's baseUs, or with none seen the version read); a key moved off a
 * copy of a change other than the one that change replaced (prevUs), or with none seen off any copy
 * older than the version read (the view does not say which change the revert replaced). A key's own
 * numbers, or a change whose id says nothing of what it replaced, run up to it.
 */
function missedBefore(state: BucketState, record: OverrideRecord | undefined, view: PolicyView, moved: boolean): boolean {
  const change = view.policy;
  const prior = change ? priorOf(change.id) : view.policySeenUs === undefined ? undefined : [view.policySeenUs, view.policySeenUs];
  if (prior === undefined) return false;
  if (!numbersLive(record, state.atUs)) return state.atUs < prior[1]!;
  return moved && record.policyId !== undefined && changeVersion(record.policyId) < prior[0]!;
}

/** Debts carried limit by limit from the numbers `from` to `to` (both in force at nowUs), the bucket's reservations pending until reservedUntilUs. */
function carryAll(debts: number[], from: readonly OverrideLimit[], to: readonly OverrideLimit[], nowUs: number, reservedUntilUs: number | undefined): number[] {
  if (from === to) return debts;
  return debts.map((d, i) => (sameNumbers(from[i]!, to[i]!) ? d : carryDebt(d, from[i]!, to[i]!, nowUs, reservedUntilUs)));
}

/** The record without what has ended by nowUs (numbers past untilUs, a block past blockedUntilUs); undefined when nothing is left. */
export function liveRecord(record: OverrideRecord | undefined, nowUs: number): OverrideRecord | undefined {
  if (record === undefined) return undefined;
  const numbers = numbersLive(record, nowUs);
  const block = blockLive(record, nowUs);
  // A copy of a policy-wide change whose numbers ended is the marker of that change from then on.
  const marker = record.policyId !== undefined && !numbers;
  if (!numbers && !block && !marker) return undefined;
  // Nothing has ended: the record itself (a step then leaves it unwritten).
  if ((numbers || record.limits === undefined) && (block || record.blockedUntilUs === undefined)) return record;
  const out: { -readonly [K in keyof OverrideRecord]: OverrideRecord[K] } = {};
  if (numbers) out.limits = record.limits;
  if (numbers && record.untilUs !== undefined) out.untilUs = record.untilUs;
  if ((numbers || marker) && record.policyId !== undefined) out.policyId = record.policyId;
  if (block) out.blockedUntilUs = record.blockedUntilUs;
  return out;
}

/**
 * The step's arguments under the numbers `to` (per limit; `base` where they are the step's own): costs
 * converted (a charge rounded up, a refund down), the wait's cap and the refill `to`'s, a grant's token
 * `to`'s. A late refund (refundSinceUs) is decayed here, by the lesser of what is left of it under
 * either refill: the bucket may have refilled at the base's rate for part of the time since the grant.
 */
function argsUnder(args: StepArgs, base: readonly OverrideLimit[], to: readonly OverrideLimit[], nowUs: number): StepArgs {
  const b = args.base!;
  const since = args.refundSinceUs;
  const limits = args.limits.map((l, i): LimitStep => {
    const t = to[i]!;
    const lateRefund = l.costUnits < 0 && since !== undefined;
    if (t === base[i] && !lateRefund) return l;
    const from = b.tokenUnits[i]!;
    let costUnits = convertUnits(l.costUnits, from, t.tokenUnits, l.costUnits >= 0 ? 'up' : 'down');
    if (lateRefund) {
      const underBase = convertUnits(refundUnitsAt(l.costUnits, l.refillUnitsPerUs, since, nowUs), from, t.tokenUnits, 'down');
      costUnits = -Math.min(underBase, refundUnitsAt(costUnits, t.refillUnitsPerUs, since, nowUs));
    }
    if (t === base[i]) return { costUnits, limitUnits: l.limitUnits, refillUnitsPerUs: l.refillUnitsPerUs };
    // A take's cost above the capacity in force never fits at once: refused (a wait would admit it as one burst).
    const limitUnits = b.maxWaitMs === 0 || (!args.adjust && costUnits > t.capacityUnits) ? t.capacityUnits : Math.min(MAX_LIMIT_UNITS, t.capacityUnits + b.maxWaitMs * t.refillUnitsPerUs * 1000);
    return { costUnits, limitUnits, refillUnitsPerUs: t.refillUnitsPerUs };
  });
  const out: { -readonly [K in keyof StepArgs]: StepArgs[K] } = { limits };
  if (args.adjust) out.adjust = true;
  if (args.tokenUnits !== undefined) out.tokenUnits = to[0]!.tokenUnits;
  return out;
}

/** What a store writes after a step or an override: the bucket (null: delete it) and the record (null: delete it); undefined: leave it. */
export type OverrideWrites = { write?: BucketState | null; writeRecord?: OverrideRecord | null };

/**
 * The record a step leaves: the policy-wide change installed, replaced or cleared (a key's own record is
 * kept). Nodes may disagree for a while after a change (each reads it on its own), so a change never
 * replaces a newer one: a key's copy or marker newer than this node's view (a version above its
 * change's, or at or above the reading that found none: args.policySeenUs) is kept, and the step
 * decides under it. So each key moves from one change to the next once, in the order they were made.
 */
function recordForStep(record: OverrideRecord | undefined, args: Pick<StepArgs, 'policy' | 'policySeenUs'>): OverrideRecord | undefined {
  const change = args.policy;
  const copy = record?.policyId;
  const seen = args.policySeenUs ?? 0;
  if (copy !== undefined && newerThanView(copy, change, seen)) return record;
  if (change === undefined) {
    if (copy === undefined || record!.limits === undefined) return record;
    return record!.blockedUntilUs === undefined ? { policyId: `${seen}.` } : { policyId: `${seen}.`, blockedUntilUs: record!.blockedUntilUs };
  }
  if (record !== undefined && (copy === undefined ? record.limits !== undefined : copy === change.id)) return record;
  const installed: { -readonly [K in keyof OverrideRecord]: OverrideRecord[K] } = { limits: change.limits, policyId: change.id };
  if (change.untilUs !== undefined) installed.untilUs = change.untilUs;
  if (record?.blockedUntilUs !== undefined) installed.blockedUntilUs = record.blockedUntilUs;
  return installed;
}

/**
 * One step at nowUs on a bucket stored as `state` beside the override record `record` (undefined:
 * none): `step` under the numbers in force, with what to write. With no record and no policy-wide
 * change it is `step` itself. A live block refuses a take (a peek, a reservation, a lease grant) and
 * writes nothing; an adjustment (a charge, a refund, a settlement) is applied as without the block, so
 * that work done is paid for and accounting never freezes, and reports the block too. The policy-wide change
 * (StepArgs.policy) is installed, replaced or cleared on a key without a record of its own, carrying the
 * bucket; the step runs under the numbers then in force (StepArgs.base converted: costs rounded against
 * the caller, the wait's cap and the refill the record's); a write drops a record with nothing live.
 * The result carries `limits` when the numbers were the record's, `blockedUntilUs` when blocked (a
 * take refused, or an adjustment applied on a blocked key).
 */
export function stepWithRecord(state: BucketState | undefined, nowUs: number, args: StepArgs, record: OverrideRecord | undefined): StepResult & OverrideWrites {
  if (record === undefined && args.policy === undefined) {
    // A bucket read before the policy's numbers were last in force up to the version this node read
    // refills nothing until then (see missedBefore): as if read then.
    const seen = args.policySeenUs!;
    return step(state !== undefined && state.atUs < seen ? { ...state, atUs: Math.min(seen, nowUs) } : state, nowUs, args);
  }
  if (args.base === undefined) {
    // Without the base numbers only a block can be honoured: numbers to step under or carry need them.
    if (args.policy !== undefined || record?.policyId !== undefined || numbersLive(record, nowUs) || (state !== undefined && numbersLive(record, state.atUs))) {
      throw new Error('[edge-limiter] a step on a key with override numbers needs StepArgs.base');
    }
    if (!blockLive(record, nowUs)) return step(state, nowUs, args);
    if (args.adjust) return { ...step(state, nowUs, args), blockedUntilUs: record!.blockedUntilUs! };
    return { allowed: false, debtUnits: args.limits.map((l, i) => debtAt(state, i, nowUs, l.refillUnitsPerUs)), atUs: nowUs, blockedUntilUs: record!.blockedUntilUs! };
  }
  const base = stepBaseNumbers(args.limits, args.base);
  const next = liveRecord(recordForStep(liveRecord(record, nowUs), args), nowUs);
  const to = numbersAt(next, nowUs, base);
  const debts = carried(state, nowUs, base, record, next, to, args);
  const now: BucketState = stateAt(debts, nowUs, state);
  const inForce = to === base ? undefined : to.slice();
  const blocked = blockLive(next, nowUs);
  // A take refused by a block takes nothing, but writes a changed record as any step does (a policy-wide
  // change installed reaches the key now, not after the block, when its bucket has refilled under the old).
  const r: StepResult & OverrideWrites =
    blocked && !args.adjust ? { allowed: false, debtUnits: debts, atUs: nowUs } : step(state === undefined ? undefined : now, nowUs, to === base ? args : argsUnder(args, base, to, nowUs), to.map((n) => n.capacityUnits));
  if (inForce) r.limits = inForce;
  if (blocked) r.blockedUntilUs = next!.blockedUntilUs!;
  if (next !== record) {
    // The record changed (installed, replaced, cleared, or what had ended dropped): the bucket is
    // rewritten at now in the numbers now in force, whatever the step did.
    if (r.write === undefined && state !== undefined) r.write = written(now);
    r.writeRecord = next ?? null;
  }
  return r;
}

/** The policy's record's baseUs (see priorOf) for a change of version v replacing `record` at nowUs. */
function baseSince(record: OverrideRecord | undefined, nowUs: number, v: number): number {
  if (record?.policyId === undefined) return 0;
  if (numbersLive(record, nowUs)) return v;
  return record.limits !== undefined ? record.untilUs! : (priorOf(record.policyId)?.[1] ?? changeVersion(record.policyId));
}

/** A record's fields as text, to compare two by what they say (a step installs a change's copy with its keys in another order). */
const recordKey = (r: OverrideRecord | undefined) => JSON.stringify(r && [r.untilUs, r.blockedUntilUs, r.policyId, r.limits?.map(numbersOf)]);

/**
 * Store.override's one atomic step at nowUs, pure: the record after the change (numbers set or cleared,
 * a block set or lifted, what has ended dropped; the view applied), and the bucket carried to the numbers
 * after (written at nowUs; null when it is full). Nothing to change: nothing written.
 */
export function applyOverride(state: BucketState | undefined, record: OverrideRecord | undefined, nowUs: number, args: OverrideArgs): OverrideResult & OverrideWrites {
  const { base } = args;
  // A policy-wide call that changes nothing of its record, decided in this atomic step (review 13: a
  // read before it may be stale, or the record lost), writes nothing: a revert of a record with no
  // change in force, or the numbers in force for the same limits, neither with an end (a new version
  // would be one every node reads, and a key written before it would refill nothing up to it).
  if (args.policyId !== undefined && args.limits !== undefined && record?.policyId !== undefined && (args.limits === null ? !numbersLive(record, nowUs) : record.limits !== undefined && record.untilUs === undefined && args.forMs === undefined && recordKey({ limits: record.limits }) === recordKey({ limits: args.limits }) && record.policyId.split('#')[1] === args.policyId.split('#')[1])) {
    const kept = liveRecord(record, nowUs);
    return kept ? { atUs: nowUs, before: kept, after: kept } : { atUs: nowUs };
  }
  const next: { -readonly [K in keyof OverrideRecord]: OverrideRecord[K] } = { ...record };
  if (args.limits === null) {
    // A key's clear takes its own numbers away; a copy of a policy-wide change or a marker stays.
    if (args.policyId !== undefined || next.policyId === undefined) {
      delete next.limits;
      delete next.untilUs;
      delete next.policyId;
    }
  } else if (args.limits !== undefined) {
    next.limits = args.limits;
    if (args.forMs === undefined) delete next.untilUs;
    else next.untilUs = nowUs + args.forMs * 1000;
    if (args.policyId === undefined) delete next.policyId;
  }
  // A policy-wide change's id gets its version here, in the same atomic step (changeVersion); with
  // `limits: null` the policy's record becomes a marker of its revert.
  if (args.policyId !== undefined && args.limits !== undefined) {
    const prevUs = changeVersion(record?.policyId);
    const v = Math.max(nowUs, prevUs + 1);
    next.policyId = `${v}.${prevUs}.${baseSince(record, nowUs, v)}.${args.policyId}`;
  }
  if (args.blockForMs === null) delete next.blockedUntilUs;
  else if (args.blockForMs !== undefined) next.blockedUntilUs = nowUs + args.blockForMs * 1000;
  // A read (no numbers, no block) writes nothing, even where something has ended: the key's next step
  // carries its bucket past that end, under its node's view of a policy-wide change (stepWithRecord).
  const read = args.limits === undefined && args.blockForMs === undefined;
  // With the node's view (not on the policy's own record): left as a step under it leaves them (review 3).
  const view = read || args.policyId !== undefined ? undefined : args;
  let after = liveRecord(next, nowUs);
  if (view) after = liveRecord(recordForStep(after, view), nowUs);
  const out: OverrideResult & OverrideWrites = { atUs: nowUs };
  const before = liveRecord(record, nowUs);
  if (before !== undefined) out.before = before;
  if (after !== undefined) out.after = after;
  if (read && record !== undefined) out.stored = record;
  if (read || recordKey(record) === recordKey(after)) return out;
  out.writeRecord = after ?? null;
  if (state !== undefined) {
    const debts = carried(state, nowUs, base, record, view && liveRecord(recordForStep(before, view), nowUs), numbersAt(after, nowUs, base), view && (view.policy ?? view.policySeenUs) !== undefined ? view : undefined);
    out.write = written(stateAt(debts, nowUs, state));
  }
  return out;
}

/**
 * The store clock's reading, in whole µs, from which a key's bucket and record hold nothing: every limit
 * full, the record's numbers and block ended. Infinity while a key's own numbers with no end are live,
 * and for numbers with an end (a key's own, or a copy of a policy-wide change) with the bucket still
 * spent at their end: from their end the key is in whatever change is in force then, however slow,
 * which no step may have seen yet, so it is kept until its next step. Otherwise a key's copy of a
 * policy-wide change (`policyId`) does not hold the key: with its bucket full it may go, as the next
 * step installs it again (a marker too); `pinned`: the record is the policy-wide change itself, or the
 * marker of its revert (written by Store.override with a policyId), held for good, past its end too: a
 * node that read an older change learns from it that this one was made and has ended.
 * What a store's expiry of the key (Redis PX, MongoDB's TTL field, the Durable Object's alarm) must be
 * at least; `state` undefined: a full bucket.
 */
export function keepUntilUs(state: BucketState | undefined, base: readonly OverrideLimit[], record: OverrideRecord | undefined, pinned = false, holdUntilUs = 0): number {
  let until = 0;
  if (pinned) return Infinity;
  if (record?.limits !== undefined && record.policyId === undefined) until = record.untilUs ?? Infinity;
  // A key's copy or marker is held at least until holdUntilUs (StepArgs.policyHoldMs after the step that wrote it).
  else if (record?.policyId !== undefined) until = holdUntilUs;
  if (record?.blockedUntilUs !== undefined && record.blockedUntilUs > until) until = record.blockedUntilUs;
  if (state === undefined) return until;
  // (Not before a reservation's caller may come: a change in that ms carries the bucket, see carryDebt.)
  if (state.reservedUntilUs !== undefined && state.reservedUntilUs + CALLER_LAG_US > until) until = state.reservedUntilUs + CALLER_LAG_US;
  const from = numbersAt(record, state.atUs, base);
  const end = record?.untilUs;
  for (let i = 0; i < base.length; i++) {
    const full = state.atUs + ceilDiv(state.debtUnits[i] ?? 0, from[i]!.refillUnitsPerUs);
    if (end !== undefined && full > end && numbersLive(record, state.atUs)) return Infinity;
    if (full > until) until = full;
  }
  return until;
}
