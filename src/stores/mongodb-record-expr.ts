// The MQL that reads an override record in the MongoDB store's pipelines (./mongodb-override.ts): a
// missing field as null, an array's element, a marker, a limit's numbers as stored, and core/override.ts
// liveRecord and numbersLive of a record expression at the update's clock reading.
import type { OverrideLimit, PolicyOverride } from '../core/override.js';
import { versionExpr, type Expr } from './mongodb-mql.js';

/** The update's clock reading, in µs (set by the pipeline's first stage). */
export const NOW = '$_sNow';

/** A field that may be missing, as null (MongoDB and mingo order a missing field differently). */
export const orNull = (e: Expr) => ({ $ifNull: [e, null] });
export const isSet = (e: Expr) => ({ $ne: [orNull(e), null] });
export const unset = (e: Expr) => ({ $eq: [orNull(e), null] });
/** Element i of an array expression that may be null, or null. */
export const elem = (arr: Expr, i: number) => ({ $cond: [{ $isArray: [arr] }, { $arrayElemAt: [arr, i] }, null] });
/** Whether an array expression (or null) has an element i. */
export const has = (arr: Expr, i: number) => ({ $and: [{ $isArray: [arr] }, { $gt: [{ $size: { $cond: [{ $isArray: [arr] }, arr, []] } }, i] }] });

/** Whether the record expression is a marker (core/override.ts isMarker): a policy-wide id and no numbers. */
export const markerExpr = (r: string) => ({ $and: [{ $not: [{ $isArray: [`${r}.limits`] }] }, isSet(`${r}.policyId`)] });

/** One limit's numbers as stored: always these three fields in this order, so records compare by value. */
export function limitDoc(l: OverrideLimit): OverrideLimit {
  return { tokenUnits: l.tokenUnits, capacityUnits: l.capacityUnits, refillUnitsPerUs: l.refillUnitsPerUs };
}

/** core/override.ts liveRecord of the record expression `r` (an object or null) at NOW: what has ended dropped, null when nothing is left. */
export function liveRecordExpr(r: Expr): object {
  return {
    $let: {
      vars: { r },
      in: {
        $let: {
          vars: {
            n: { $and: [{ $isArray: ['$$r.limits'] }, { $or: [unset('$$r.untilUs'), { $lt: [NOW, '$$r.untilUs'] }] }] },
            b: { $and: [isSet('$$r.blockedUntilUs'), { $gt: [orNull('$$r.blockedUntilUs'), NOW] }] },
          },
          in: {
            $switch: {
              branches: [
                { case: { $eq: ['$$r', null] }, then: null },
                // A marker (an id and no numbers) is something left, as numbers are; so is a copy of a
                // policy-wide change whose numbers ended (the marker of that change from then on).
                { case: { $and: [{ $not: ['$$n'] }, { $not: ['$$b'] }, unset('$$r.policyId')] }, then: null },
                { case: { $and: [{ $or: ['$$n', unset('$$r.limits')] }, { $or: ['$$b', unset('$$r.blockedUntilUs')] }] }, then: '$$r' },
              ],
              default: {
                limits: { $cond: ['$$n', '$$r.limits', '$$REMOVE'] },
                untilUs: { $cond: ['$$n', { $ifNull: ['$$r.untilUs', '$$REMOVE'] }, '$$REMOVE'] },
                blockedUntilUs: { $cond: ['$$b', '$$r.blockedUntilUs', '$$REMOVE'] },
                policyId: { $ifNull: ['$$r.policyId', '$$REMOVE'] },
              },
            },
          },
        },
      },
    },
  };
}

/** Whether the record expression (object or null) has numbers live at NOW. */
export const numbersLiveExpr = (r: string) => ({ $and: [{ $isArray: [`${r}.limits`] }, { $or: [unset(`${r}.untilUs`), { $lt: [NOW, `${r}.untilUs`] }] }] });

/** The end of `change` when it has ended by NOW and `viewed` holds its copy (or marker), else 0. */
export function endedAt(change: PolicyOverride | undefined, viewed: string): Expr {
  const u = change?.untilUs;
  return u === undefined ? 0 : { $cond: [{ $and: [{ $lte: [u, NOW] }, { $eq: [orNull(`${viewed}.policyId`), { $literal: change!.id }] }] }, u, 0] };
}

/**
 * The id of a policy-wide change or revert written on the policy's record `$_sO` (core/override.ts
 * applyOverride): "<version>.<prevUs>.<baseUs>.<policyId>", the version max(now, the replaced one's + 1),
 * and what it replaced (core baseSince: 0 for none, the version for a change in force, a change's end, a
 * revert's own baseUs).
 */
export function versionedIdExpr(policyId: string): Expr {
  const pv = versionExpr('$_sO.policyId');
  const v = { $max: [NOW, { $add: [pv, 1] }] };
  const parsed = { $let: { vars: { m: { $regexFind: { input: '$_sO.policyId', regex: '^[0-9]+\\.[0-9]+\\.([0-9]+)\\.' } } }, in: { $cond: [{ $eq: ['$$m', null] }, pv, { $toDouble: { $arrayElemAt: ['$$m.captures', 0] } }] } } };
  const since = { $cond: [unset('$_sO.policyId'), 0, { $cond: [numbersLiveExpr('$_sO'), v, { $ifNull: ['$_sO.untilUs', parsed] }] }] };
  const text = (e: Expr) => ({ $toString: { $toLong: e } });
  return { $concat: [text(v), '.', text(pv), '.', text(since), { $literal: `.${policyId}` }] };
}

/**
 * Whether a policy-wide call (`args.policyId` with limits or null) changes nothing of the policy's
 * record `$_sO` (core/override.ts applyOverride): a revert with a record but no change in force, or the
 * numbers in force for the same limits, neither with an end. The record is then kept as it is.
 */
export function unchangedExpr(args: { limits?: readonly OverrideLimit[] | null; forMs?: number; policyId?: string }): Expr {
  if (args.limits === null) return { $and: [isSet('$_sO.policyId'), { $not: [numbersLiveExpr('$_sO')] }] };
  if (args.forMs !== undefined) return false;
  const names = { $ifNull: [{ $arrayElemAt: [{ $split: [{ $ifNull: ['$_sO.policyId', ''] }, '#'] }, 1] }, null] };
  return { $and: [isSet('$_sO.policyId'), numbersLiveExpr('$_sO'), unset('$_sO.untilUs'), { $eq: ['$_sO.limits', { $literal: (args.limits ?? []).map(limitDoc) }] }, { $eq: [names, { $literal: args.policyId?.split('#')[1] ?? null }] }] };
}
