// The MQL of override records in the MongoDB store: core/override.ts `stepWithRecord` and
// `applyOverride`, line by line, as stages of an update pipeline over a bucket document whose `ov`
// field holds the key's record (OverrideRecord). stepPipeline runs a step with the plan built here;
// overridePipeline is Store.override. Pure: builds values, sends nothing.
import { changeVersion, numbersAt, priorOf, type OverrideArgs, type OverrideLimit, type PolicyOverride } from '../core/override.js';
import type { LimitStep, StepArgs } from '../core/gcra.js';
import { MAX_LIMIT_UNITS } from '../core/policy.js';
import { carryExpr, convertExpr, decayedExpr, horizonUntil, keptHorizon, NOW_US, RESERVED, storedDebt, versionExpr, type Expr } from './mongodb-mql.js';
import { elem, endedAt, has, isSet, limitDoc, liveRecordExpr, markerExpr, NOW, numbersLiveExpr, orNull, unchangedExpr, unset, versionedIdExpr } from './mongodb-record-expr.js';

/** One limit's numbers in a step: literals (the step's own) or expressions (a record's, read in the update). */
export interface LimitParams {
  /** The debt the step adds (below 0 a refund), of the same sign as the step's own costUnits. */
  cost: Expr;
  /** The largest debt allowed after it. */
  limit: Expr;
  /** Units refilled per µs. */
  refill: Expr;
  /** A refund's units given back, already decayed (absent: from cost and StepArgs.refundSinceUs). */
  refund?: Expr;
}

/**
 * What turns stepPipeline into the step of a document that may hold an override record
 * (mongodb-override.ts builds it): stages that run after the clock reading and set each limit's debt now
 * (`_sD<i>`) in the numbers in force, those numbers, and the fields the record adds to the final write.
 */
export interface RecordPlan {
  /** The numbers the step was multiplied out from, per limit. */
  base: readonly OverrideLimit[];
  stages: object[];
  limit(i: number): LimitParams;
  /**
   * Limit i's units of the step (a settlement's actual minus charged, of either sign) in the numbers in
   * force: converted, a charge up and a refund down, where they are the record's.
   */
  convert(i: number, units: Expr): Expr;
  /** Whether every cost is 0 in the numbers in force (the step is then a peek, as core step reads it). */
  zero: Expr;
  /** A partial grant's token size in the numbers in force. */
  tokenUnits?: Expr;
  scratch: string[];
}


/**
 * The stages every record plan shares, after `_sNow`: the stored record (`_sO`, null when none), the
 * record after the change (`_sN`) and whether it differs (`_sChg`), both set by `record` (stages that
 * read `_sO`), then each limit's numbers before (`_sF<i>`: in force at now under the stored record) and
 * after (`_sT<i>`, under `_sN`), and each limit's debt now (`_sD<i>`), carried from the one to the other.
 * `kept`: whether `record` leaves the stored record's numbers in place (core carries nothing then, not
 * even the cap at MAX_LIMIT_UNITS, which a debt above it after a clock that went back would meet).
 * `to`: where numbers that ended since the bucket's reading go at their end (core's carried): whether to
 * the change a step under the node's view installs (else the base), and its numbers; absent: the base.
 */
function carryStages(base: readonly OverrideLimit[], record: object[], kept: Expr, to?: { split: Expr; numbers: (i: number) => Expr }, view?: { viewed: string; args: Pick<StepArgs, 'policy' | 'policySeenUs'> }): { stages: object[]; scratch: string[] } {
  const idx = base.map((_, i) => i);
  const R = (i: number) => `_sR${i}`;
  const F = (i: number) => `_sF${i}`;
  const T = (i: number) => `_sT${i}`;
  const V = (i: number) => `_sV${i}`;
  const stages: object[] = [
    // _sRk: the stored reservation horizon while its caller may still come (what a write keeps, core stateAt), else 0.
    { $set: { _sO: orNull('$ov'), _sSt: { $and: [isSet('$debt'), isSet('$atUs')] }, _sRk: keptHorizon(NOW) } },
    ...record,
    {
      $set: {
        _sL: { $cond: [{ $isArray: ['$_sO.limits'] }, '$_sO.limits', null] },
        _sU: orNull('$_sO.untilUs'),
        _sNL: { $cond: [numbersLiveExpr('$_sN'), '$_sN.limits', null] },
      },
    },
    {
      $set: {
        // numbersAt(record, atUs): the numbers the stored bucket is in; at now: the numbers in force before.
        _sAtIn: { $and: ['$_sSt', isSet('$_sL'), { $or: [unset('$_sU'), { $lt: ['$atUs', '$_sU'] }] }] },
        _sNowIn: { $and: [isSet('$_sL'), { $or: [unset('$_sU'), { $lt: [NOW, '$_sU'] }] }] },
        ...Object.fromEntries(idx.map((i) => [R(i), elem('$_sL', i)])),
        ...Object.fromEntries(idx.map((i) => [T(i), { $cond: [has('$_sNL', i), elem('$_sNL', i), { $literal: limitDoc(base[i]!) }] }])),
      },
    },
    {
      $set: {
        _sSplit: { $and: ['$_sAtIn', isSet('$_sU'), { $gte: [NOW, '$_sU'] }] },
        // The split goes to the change a step under the view installs where that was made by the end (core's `after`).
        _sTo: to ? { $and: ['$_sAtIn', isSet('$_sU'), { $gte: [NOW, '$_sU'] }, to.split] } : false,
        ...(to ? Object.fromEntries(idx.map((i) => [V(i), to.numbers(i)])) : {}),
        // carryAll's `from === to`: the base before and after, or the stored numbers (one per limit) kept.
        _sSame: { $or: [{ $and: [{ $not: ['$_sNowIn'] }, unset('$_sNL')] }, { $and: ['$_sNowIn', isSet('$_sNL'), { $eq: [{ $size: { $ifNull: ['$_sL', []] } }, base.length] }, kept] }] },
        ...Object.fromEntries(idx.map((i) => [F(i), { $cond: [{ $and: ['$_sNowIn', has('$_sL', i)] }, `$${R(i)}`, { $literal: limitDoc(base[i]!) }] }])),
      },
    },
    {
      // debtsAt (`_sE<i>`): decayed under the numbers it is in, with the expiry split (to the base, or
      // with `_sTo` to the change, limit by limit: `_sT<i>`); then carried from the numbers in force
      // before (`_sF<i>`, or `_sT<i>` after a split to them) to those after (carryAll), where not the same.
      $set: Object.fromEntries(
        idx.map((i) => {
          const b = { $literal: limitDoc(base[i]!) };
          const d = storedDebt(i);
          const split = (f: Expr, to: Expr) => decayedExpr(carryExpr(decayedExpr(d, '$atUs', '$_sU', `${f}.refillUnitsPerUs`), f, to, '$_sU', RESERVED), '$_sU', NOW, `${to}.refillUnitsPerUs`);
          const r = `$${R(i)}`;
          const inR = { $cond: ['$_sSplit', { $cond: ['$_sTo', split(r, `$${V(i)}`), split(r, '$$b')] }, decayedExpr(d, '$atUs', NOW, `${r}.refillUnitsPerUs`)] };
          const inBase = { $cond: ['$_sTo', split('$$b', `$${V(i)}`), decayedExpr(d, '$atUs', NOW, '$$b.refillUnitsPerUs')] };
          return [`_sE${i}`, { $let: { vars: { b }, in: { $cond: ['$_sSt', { $cond: [{ $and: ['$_sAtIn', has('$_sL', i)] }, inR, inBase] }, 0] } } }];
        }),
      ),
    },
    { $set: Object.fromEntries(idx.map((i) => [`_sD${i}`, { $cond: ['$_sSame', `$_sE${i}`, carryExpr(`$_sE${i}`, { $cond: ['$_sTo', `$${V(i)}`, `$${F(i)}`] }, `$${T(i)}`, NOW, RESERVED)] }])) },
  ];
  const scratch = ['_sO', '_sSt', '_sRk', '_sN', '_sChg', '_sL', '_sU', '_sNL', '_sAtIn', '_sNowIn', '_sSplit', '_sTo', '_sSame', ...idx.map((i) => `_sE${i}`), ...idx.map(R), ...idx.map(F), ...idx.map(T), ...(to ? idx.map(V) : [])];
  if (view) {
    // core's carried with a view: a move to the numbers of the record a step under it leaves (`viewed`:
    // another copy, a marker, numbers that ended) counted from when they came in force too (`_sMw`), nothing
    // refilled from the end of numbers that ended to then; each limit keeps the greater debt.
    const x = view.viewed;
    const { policy: change, policySeenUs: seen } = view.args;
    const moved = { $or: ['$_sSplit', { $ne: [orNull(`${x}.policyId`), orNull('$_sO.policyId')] }] };
    // core's missedBefore (`_sMc`), with the view's priorOf; `_sMf`: nothing refilled from the bucket's reading.
    const prior = change ? priorOf(change.id) : seen === undefined ? undefined : [seen, seen];
    const copyOff = { $and: [moved, isSet('$_sO.policyId'), { $lt: [versionExpr('$_sO.policyId'), prior?.[0]] }] };
    const missed = prior === undefined ? false : { $cond: ['$_sAtIn', copyOff, { $lt: ['$atUs', prior[1]] }] };
    // `_sMt` (core's t0): to an end; a copy replaced before it, to the record seen's version, or atUs (`_sMc`).
    const kept = { $eq: [orNull(`${x}.policyId`), orNull('$_sO.policyId')] };
    const copyEnd = { $cond: ['$_sMc', '$atUs', { $cond: [kept, '$_sU', { $min: ['$_sU', { $max: ['$atUs', versionExpr(`${x}.policyId`)] }] }] }] };
    stages.push(
      { $set: { _sMc: { $and: ['$_sSt', missed] }, _sMx: { $cond: [numbersLiveExpr(x), `${x}.limits`, null] } } },
      {
        $set: {
          _sMf: { $and: ['$_sSt', { $or: [{ $gt: [endedAt(change, x), '$atUs'] }, '$_sMc'] }] },
          _sMt: { $cond: ['$_sSplit', { $cond: [unset('$_sO.policyId'), '$_sU', copyEnd] }, '$atUs'] },
        },
      },
      { $set: { _sMv: { $and: ['$_sSt', { $or: [moved, '$_sMf'] }] } } },
      // (A change the view holds that has ended, and whose copy `viewed` is: in force from its end.)
      { $set: { _sMw: { $min: [NOW, { $max: ['$_sMt', change ? 0 : (view.args.policySeenUs ?? 0), versionExpr(`${x}.policyId`), endedAt(change, x)] }] } } },
      {
        $set: Object.fromEntries(
          idx.map((i) => {
            const b = { $literal: limitDoc(base[i]!) };
            const f = { $cond: [{ $and: ['$_sAtIn', has('$_sL', i)] }, `$${R(i)}`, b] };
            const v = { $cond: [has('$_sMx', i), elem('$_sMx', i), b] };
            // (Named apart from carryExpr's own $let variables.)
            const a = decayedExpr(storedDebt(i), '$atUs', { $cond: [{ $or: ['$_sSplit', '$_sMf'] }, '$_sMt', '$_sMw'] }, '$$mf.refillUnitsPerUs');
            const k = carryExpr(decayedExpr(carryExpr(a, '$$mf', '$$mv', '$_sMw', RESERVED), '$_sMw', NOW, '$$mv.refillUnitsPerUs'), '$$mv', `$${T(i)}`, NOW, RESERVED);
            return [`_sD${i}`, { $cond: ['$_sMv', { $let: { vars: { mf: f, mv: v }, in: { $max: [`$_sD${i}`, k] } } }, `$_sD${i}`] }];
          }),
        ),
      },
    );
    scratch.push('_sMv', '_sMc', '_sMf', '_sMx', '_sMt', '_sMw');
  }
  return { stages, scratch };
}

/**
 * The expiry of a document written at NOW with each limit's debt `w(i)` in the numbers `_sT<i>` beside
 * the record `_sN`: never (`$$REMOVE`) while the record has a key's own numbers with no end, or numbers
 * with an end (its own, or a copy of a policy-wide change) and a limit still spent at it (until the
 * key's next step), and always when `pinned` (the policy-wide change itself or its revert's marker, past
 * its end too: core keepUntilUs); otherwise when every limit is full under the numbers in force, and no
 * sooner than the record's untilUs and blockedUntilUs (a Date, ms rounded up), and `also` (a Date or
 * null: the operation records). A key's copy of a policy-wide change or marker goes with its full bucket
 * (the next step installs it again), but not before `holdMs` from now (StepArgs.policyHoldMs: core
 * keepUntilUs' holdUntilUs), as long as another node may hold an older view.
 */
export function expiryExpr(base: readonly OverrideLimit[], w: (i: number) => Expr, also: Expr, pinned = false, holdMs = 0): Expr {
  // The policy-wide change itself, or its revert's marker, is kept for good, past its end too (core
  // keepUntilUs); a document left with nothing (a change of 0 ms) goes.
  if (pinned) return { $cond: [isSet('$_sN'), '$$REMOVE', { $toDate: { $ceil: { $divide: [NOW, 1000] } } }] };
  // Full under the numbers in force (the record's, or the base's).
  const unders = base.map((_, i) => ({ $add: [NOW, { $ceil: { $divide: [w(i), `$_sT${i}.refillUnitsPerUs`] } }] }));
  const hold = holdMs > 0 ? [{ $cond: [isSet('$_sN.policyId'), { $add: [NOW, holdMs * 1000] }, null] }] : [];
  const us = { $max: [...unders, orNull('$_sN.untilUs'), orNull('$_sN.blockedUntilUs'), ...hold, horizonUntil('$_sRv')] };
  const spentAtEnd = { $and: [isSet('$_sNL'), isSet('$_sN.untilUs'), { $or: unders.map((u) => ({ $gt: [u, '$_sN.untilUs'] })) }] };
  const never = { $or: [{ $and: [isSet('$_sNL'), unset('$_sN.untilUs'), unset('$_sN.policyId')] }, spentAtEnd] };
  return {
    $cond: [
      never,
      '$$REMOVE',
      { $max: [{ $toDate: { $ceil: { $divide: [us, 1000] } } }, orNull(also)] },
    ],
  };
}

/**
 * core/override.ts stepWithRecord's record: next = liveRecord(recordForStep(liveRecord(record))), as
 * stages setting `_sN` from `from` (the stored record `_sO`, or the record an override leaves); and, from
 * `_sO`, `_sChg`, whether next is another record than the stored one (it is the same object there only
 * when liveRecord drops nothing from it and recordForStep keeps it: `_sKp`).
 */
function stepRecord(args: Pick<StepArgs, 'policy' | 'policySeenUs'>, from = '$_sO'): object[] {
  const change = args.policy;
  // No view at all (policySeenUs absent) is the oldest: the key keeps whatever it holds.
  const seen = args.policySeenUs ?? 0;
  const l1 = '$_sL1';
  // recordForStep: a key's copy or marker newer than this node's view is kept, and the step decides under it.
  const v = versionExpr(`${l1}.policyId`);
  const newer = change !== undefined ? { $gt: [v, changeVersion(change.id)] } : { $gte: [v, seen] };
  let keep: object;
  let other: object;
  if (change === undefined) {
    // No policy-wide change seen: a key's own record and a marker stay; an older copy of one gives way to
    // the marker of this node's reading, "<policySeenUs>." (its block kept).
    keep = { $or: [unset(`${l1}.policyId`), newer, { $not: [{ $isArray: [`${l1}.limits`] }] }] };
    other = { $cond: [isSet(`${l1}.blockedUntilUs`), { policyId: { $literal: `${seen}.` }, blockedUntilUs: `${l1}.blockedUntilUs` }, { policyId: { $literal: `${seen}.` } }] };
  } else {
    const same = { $and: [isSet(l1), { $cond: [unset(`${l1}.policyId`), { $isArray: [`${l1}.limits`] }, { $eq: [`${l1}.policyId`, { $literal: change.id }] }] }] };
    keep = { $or: [{ $and: [isSet(`${l1}.policyId`), newer] }, same] };
    other = {
      limits: { $literal: change.limits.map(limitDoc) },
      untilUs: change.untilUs === undefined ? '$$REMOVE' : change.untilUs,
      blockedUntilUs: { $ifNull: [`${l1}.blockedUntilUs`, '$$REMOVE'] },
      policyId: { $literal: change.id },
    };
  }
  // liveRecord returns the stored record itself: something is left, and nothing in it has ended.
  const n = { $and: [{ $isArray: ['$_sO.limits'] }, { $or: [unset('$_sO.untilUs'), { $lt: [NOW, '$_sO.untilUs'] }] }] };
  const b = { $and: [isSet('$_sO.blockedUntilUs'), { $gt: [orNull('$_sO.blockedUntilUs'), NOW] }] };
  const allLive = {
    $and: [isSet('$_sO'), { $or: [n, b, markerExpr('$_sO')] }, { $or: [n, unset('$_sO.limits')] }, { $or: [b, unset('$_sO.blockedUntilUs')] }],
  };
  return [
    { $set: { _sL1: liveRecordExpr(from) } },
    { $set: { _sKp: keep } },
    { $set: { _sX: { $cond: ['$_sKp', l1, other] } } },
    { $set: { _sN: liveRecordExpr('$_sX') } },
    ...(from === '$_sO' ? [{ $set: { _sChg: { $and: [{ $or: [isSet('$_sO'), isSet('$_sN')] }, { $not: [{ $and: [allLive, '$_sKp'] }] }] } } }] : []),
  ];
}

/**
 * The plan that makes stepPipeline core/override.ts `stepWithRecord`: the record read and changed per
 * StepArgs.policy, the debts carried, and the step's numbers under the record where it has live ones
 * (costs converted and rounded against the caller, the wait's cap and the refill the record's).
 */
export function recordPlan(args: StepArgs): RecordPlan {
  const b = args.base!;
  const base = args.limits.map((l: LimitStep, i: number) => limitDoc({ tokenUnits: b.tokenUnits[i]!, capacityUnits: b.capacityUnits[i]!, refillUnitsPerUs: l.refillUnitsPerUs }));
  const { stages, scratch } = carryStages(base, stepRecord(args), '$_sKp', { split: { $and: [isSet('$_sNL'), { $lte: [versionExpr('$_sN.policyId'), '$_sU'] }] }, numbers: (i) => `$_sT${i}` }, { viewed: '$_sN', args });
  scratch.push('_sL1', '_sKp', '_sX');
  stages.push({ $set: { _sBlk: { $and: [isSet('$_sN.blockedUntilUs'), { $gt: [orNull('$_sN.blockedUntilUs'), NOW] }] } } });
  scratch.push('_sBlk');
  const since = args.refundSinceUs;
  const limit = (i: number): LimitParams => {
    const l = args.limits[i]!;
    const t = `$_sT${i}`;
    const under = has('$_sNL', i);
    const c = l.costUnits;
    let cost: Expr = c === 0 ? 0 : c > 0 ? convertExpr(c, b.tokenUnits[i]!, `${t}.tokenUnits`, 'up') : { $multiply: [-1, convertExpr(-c, b.tokenUnits[i]!, `${t}.tokenUnits`, 'down')] };
    let refund: Expr | undefined;
    if (c < 0 && since !== undefined) {
      // A late refund: the lesser of what is left of it under either refill (core argsUnder).
      const left = (units: Expr, refill: Expr) => ({ $max: [0, { $subtract: [units, { $multiply: [{ $max: [0, { $subtract: [NOW, since] }] }, refill] }] }] });
      const underBase = convertExpr(left(-c, l.refillUnitsPerUs), b.tokenUnits[i]!, `${t}.tokenUnits`, 'down');
      const underThis = left(convertExpr(-c, b.tokenUnits[i]!, `${t}.tokenUnits`, 'down'), `${t}.refillUnitsPerUs`);
      refund = { $cond: [under, { $min: [underBase, underThis] }, left(-c, l.refillUnitsPerUs)] };
      cost = { $multiply: [-1, refund] };
    }
    const wait = b.maxWaitMs;
    const capacity = `${t}.capacityUnits`;
    const withWait = { $min: [MAX_LIMIT_UNITS, { $add: [capacity, { $multiply: [{ $multiply: [wait, `${t}.refillUnitsPerUs`] }, 1000] }] }] };
    // A take's cost above the capacity in force never fits at once: refused (core argsUnder), as a wait
    // would admit it as one burst. (A settlement is an adjustment: core steps it with adjust.)
    const take = c > 0 && !args.adjust && args.settle === undefined;
    const cap = wait === 0 ? capacity : take ? { $cond: [{ $gt: [cost, capacity] }, capacity, withWait] } : withWait;
    return {
      cost: { $cond: [under, cost, c] },
      limit: { $cond: [under, cap, l.limitUnits] },
      refill: { $cond: [under, `${t}.refillUnitsPerUs`, l.refillUnitsPerUs] },
      ...(refund === undefined ? {} : { refund }),
    };
  };
  const tokenUnits = args.tokenUnits === undefined ? undefined : { $cond: [has('$_sNL', 0), '$_sT0.tokenUnits', args.tokenUnits] };
  // Only a late refund can come to 0 (all of it refilled since), and only under a record's numbers: core
  // steps with the step's own costs otherwise.
  const zeros = args.limits.map((l: LimitStep, i: number) => (l.costUnits === 0 ? true : l.costUnits < 0 && since !== undefined ? { $eq: [limit(i).refund!, 0] } : false));
  const zero = zeros.includes(false) ? false : { $and: [isSet('$_sNL'), ...zeros] };
  const convert = (i: number, units: Expr): Expr => {
    const to = `$_sT${i}.tokenUnits`;
    const signed = { $cond: [{ $gte: ['$$u', 0] }, convertExpr('$$u', b.tokenUnits[i]!, to, 'up'), { $multiply: [-1, convertExpr({ $multiply: [-1, '$$u'] }, b.tokenUnits[i]!, to, 'down')] }] };
    return { $let: { vars: { u: units }, in: { $cond: [has('$_sNL', i), signed, '$$u'] } } };
  };
  return { base, stages, scratch, limit, zero, convert, ...(tokenUnits ? { tokenUnits } : {}) };
}

/** The numbers in force after the change, one per limit, when they are the record's (StepResult.limits), else $$REMOVE. */
export function inForceExpr(n: number): object {
  return { $cond: [isSet('$_sNL'), Array.from({ length: n }, (_, i) => `$_sT${i}`), '$$REMOVE'] };
}


/** Whether every limit's debt `_sD<i>` is 0 (the bucket is full). */
export function fullExpr(n: number): object {
  return { $and: Array.from({ length: n }, (_, i) => ({ $lte: [`$_sD${i}`, 0] })) };
}

/**
 * Store.override as one update (core/override.ts applyOverride): the record after the change (numbers
 * set or cleared, a block set or lifted, what has ended dropped), the bucket carried from the numbers in
 * force before to those after and written at now; nothing written when the record is the same. `last`
 * records this call (`callId`), the clock reading and the record before, for the caller.
 */
export function overridePipeline(args: OverrideArgs, callId: string): object[] {
  const base = args.base.map(limitDoc);
  const n = base.length;
  const us = (ms: number) => ({ $add: [NOW, ms * 1000] });
  // A field kept as it is, or left out when missing (an object literal's missing field is left out by
  // MongoDB, but kept as undefined by mingo: this says it for both).
  const keep = (f: string) => ({ $ifNull: [f, '$$REMOVE'] });
  // A policy-wide change's id gets its version (core/override.ts changeVersion): the clock reading, at
  // least one above the version it replaces ($$NOW has ms resolution: two in one ms still increase).
  // With `limits: null` the record becomes the marker of the change's revert.
  const pinned = args.limits !== undefined && args.policyId !== undefined;
  const versioned = pinned ? { policyId: versionedIdExpr(args.policyId!) } : {};
  // A key's clear (`limits: null`, no policyId) takes its own numbers away; a copy of a policy-wide
  // change or a marker stays.
  const copyKept = (f: string) => ({ $cond: [isSet('$_sO.policyId'), keep(f), '$$REMOVE'] });
  const numbers =
    args.limits === undefined
      ? { limits: keep('$_sO.limits'), untilUs: keep('$_sO.untilUs'), policyId: keep('$_sO.policyId') }
      : args.limits === null
        ? pinned
          ? { ...versioned }
          : { limits: copyKept('$_sO.limits'), untilUs: copyKept('$_sO.untilUs'), policyId: copyKept('$_sO.policyId') }
        : {
            limits: { $literal: args.limits.map(limitDoc) },
            ...(args.forMs === undefined ? {} : { untilUs: us(args.forMs) }),
            ...versioned,
          };
  const blockedUntilUs = args.blockForMs === undefined ? keep('$_sO.blockedUntilUs') : args.blockForMs === null ? '$$REMOVE' : us(args.blockForMs);
  const x = {
    limits: numbers.limits ?? '$$REMOVE',
    untilUs: numbers.untilUs ?? '$$REMOVE',
    blockedUntilUs,
    policyId: numbers.policyId ?? '$$REMOVE',
  };
  const next = liveRecordExpr(x);
  // sameRecord: field by field (a missing field and a missing field are the same).
  const fields = ['limits', 'untilUs', 'blockedUntilUs', 'policyId'];
  const same = { $and: fields.map((f) => ({ $eq: [orNull(`$_sO.${f}`), orNull(`$_sN.${f}`)] })) };
  // Whether the stored numbers stay (applyOverride's next keeps them): none given, or a key's clear of a copy.
  const kept = args.limits === undefined ? true : args.limits === null && !pinned ? isSet('$_sO.policyId') : false;
  // With the node's view (a key's record, not the policy's own): the record then as a step under the view
  // leaves it, and numbers that ended carried at their end as it carries them (core applyOverride).
  const view = args.policyId === undefined && (args.policy !== undefined || args.policySeenUs !== undefined) ? args : undefined;
  const change = view?.policy;
  // (`_sVw`: the stored record as a step under the view leaves it, what core's carried moves the bucket to.)
  const record = view ? [...stepRecord(view), { $set: { _sVw: '$_sN', _sN0: next } }, ...stepRecord(view, '$_sN0')] : [{ $set: { _sN: pinned ? { $cond: [unchangedExpr(args), '$_sO', next] } : next } }];
  const to = change && {
    // The change is installed at the end of numbers that ended: in force now, made by their end, and not older than the key's copy.
    split: {
      $and: [
        change.untilUs === undefined || { $lt: [NOW, change.untilUs] },
        { $lte: [changeVersion(change.id), '$_sU'] },
        { $or: [unset('$_sO.policyId'), { $and: [{ $ne: ['$_sO.policyId', { $literal: change.id }] }, { $lte: [versionExpr('$_sO.policyId'), changeVersion(change.id)] }] }] },
      ],
    },
    numbers: (i: number) => ({ $literal: limitDoc(change.limits[i] ?? args.base[i]!) }),
  };
  const { stages, scratch } = carryStages(base, [...record, { $set: { _sChg: { $not: [same] } } }], view ? { $and: [kept, '$_sKp'] } : kept, to, view && { viewed: '$_sVw', args: view });
  if (view) scratch.push('_sN0', '_sL1', '_sKp', '_sX', '_sVw');
  const debts = Array.from({ length: n }, (_, i) => `$_sD${i}`);
  const write = (then: Expr, keep: Expr) => ({ $cond: ['$_sChg', then, keep] });
  const stored = { $and: ['$_sSt', { $or: [{ $not: [fullExpr(n)] }, { $gt: ['$_sRk', 0] }] }] };
  return [
    { $set: { _sNow: NOW_US } },
    ...stages,
    // The reservation horizon the carried bucket keeps (core applyOverride: stateAt), 0 when none.
    { $set: { _sRv: { $cond: [stored, '$_sRk', 0] } } },
    {
      $set: {
        debt: write({ $cond: [stored, debts, '$$REMOVE'] }, '$debt'),
        atUs: write({ $cond: [stored, NOW, '$$REMOVE'] }, '$atUs'),
        reservedUntilUs: write({ $cond: [{ $gt: ['$_sRv', 0] }, '$_sRv', '$$REMOVE'] }, '$reservedUntilUs'),
        ov: write({ $ifNull: ['$_sN', '$$REMOVE'] }, '$ov'),
        // A new document (nothing to change on a key with none) gets an expiry of now, so that it goes;
        // one kept until its next step keeps none, numbers with no end none, and a record with a change's id (the change itself or its
        // marker, pinned, or a key's copy or marker, which goes with its bucket) keeps the expiry it has.
        expiresAt: write(expiryExpr(base, (i) => `$_sD${i}`, '$opsUntil', pinned, args.policyHoldMs ?? 0), { $cond: [{ $or: [{ $and: [isSet('$_sNL'), unset('$_sN.untilUs')] }, markerExpr('$_sN')] }, { $cond: [unset('$_sN.policyId'), '$$REMOVE', keep('$expiresAt')] }, { $ifNull: ['$expiresAt', { $cond: [isSet('$_sO'), '$$REMOVE', { $toDate: { $ceil: { $divide: [NOW, 1000] } } }] }] }] }),
        last: write({ id: { $literal: callId }, atUs: NOW, before: { $ifNull: ['$_sO', '$$REMOVE'] } }, '$last'),
      },
    },
    { $unset: ['_sNow', '_sRv', ...scratch, ...debts.map((d) => d.slice(1))] },
  ];
}

/**
 * Store.reset of a document that holds a record or operation ids' records: the bucket forgotten
 * (debts, `last`) and the rest kept, the document then expiring with them (never while it has a key's
 * own numbers with no end; a copy of a policy-wide change goes with the bucket, now).
 */
export function resetPipeline(): object[] {
  const us = { $max: [NOW_US, orNull('$ov.untilUs'), orNull('$ov.blockedUntilUs')] };
  return [
    { $unset: ['debt', 'atUs', 'reservedUntilUs', 'last'] },
    // (The operation ids' records stay, and the document with them until opsUntil.)
    { $set: { expiresAt: { $cond: [{ $and: [{ $isArray: ['$ov.limits'] }, unset('$ov.untilUs'), unset('$ov.policyId')] }, '$$REMOVE', { $max: [{ $toDate: { $ceil: { $divide: [us, 1000] } } }, orNull('$opsUntil')] }] } } },
  ];
}
