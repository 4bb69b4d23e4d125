// Exact integer arithmetic as MQL expressions, for the MongoDB pipelines: core/gcra.ts floorDiv,
// ceilDiv and dueOf and core/override.ts convertUnits and carryDebt, on operands that may be values
// read from the document. Every operand is an integer below 2^53 held by a double, as in core, so the
// same corrections apply. And core/override.ts changeVersion, a policy-wide id's version read from the
// id; the clock reading and the bucket's stored fields, as the pipelines read them.
import { CALLER_LAG_US } from '../core/gcra.js';
import { MAX_LIMIT_UNITS } from '../core/policy.js';

/** An MQL expression, or a number (a literal). */
export type Expr = object | number | string | boolean;

/** $$NOW as whole µs (a double: exact, below 2^53). */
export const NOW_US = { $multiply: [{ $toDouble: '$$NOW' }, 1000] };

/**
 * Limit i's stored debt: element i of the `debt` array (missing: 0, a limit the bucket was stored
 * without is full), or for a document of the one-limit format (`debt` a number) that number as limit 0.
 * No document (no debt) is a full bucket.
 */
export function storedDebt(i: number): object {
  const legacy = i === 0 ? { $ifNull: ['$debt', 0] } : 0;
  return { $cond: [{ $isArray: '$debt' }, { $ifNull: [{ $arrayElemAt: ['$debt', i] }, 0] }, legacy] };
}

/** The bucket's stored reservation horizon (core BucketState.reservedUntilUs), or 0 when none is pending. */
export const RESERVED = { $ifNull: ['$reservedUntilUs', 0] };

/** When a key whose written horizon is `h` (0: none) may go at the soonest, in µs (null: any time): CALLER_LAG_US after it. */
export const horizonUntil = (h: Expr) => ({ $cond: [{ $gt: [h, 0] }, { $add: [h, CALLER_LAG_US] }, null] });

/** The stored reservation horizon a write at `now` keeps (core stateAt): while its caller may still come (CALLER_LAG_US), else 0. */
export const keptHorizon = (now: Expr) => ({ $cond: [{ $gt: [RESERVED, { $subtract: [now, CALLER_LAG_US] }] }, '$reservedUntilUs', 0] });

/** floor(a / b) exactly: the double quotient corrected by one either way (core/gcra.ts floorDiv). */
export function floorDivExpr(a: Expr, b: Expr): object {
  const q = { $floor: { $divide: ['$$a', '$$b'] } };
  return {
    $let: {
      vars: { a, b },
      in: {
        $let: {
          vars: { q },
          in: {
            $switch: {
              branches: [
                { case: { $gt: [{ $multiply: ['$$q', '$$b'] }, '$$a'] }, then: { $subtract: ['$$q', 1] } },
                { case: { $lte: [{ $multiply: [{ $add: ['$$q', 1] }, '$$b'] }, '$$a'] }, then: { $add: ['$$q', 1] } },
              ],
              default: '$$q',
            },
          },
        },
      },
    },
  };
}

/** ceil(a / b) exactly (core/gcra.ts ceilDiv). */
export function ceilDivExpr(a: Expr, b: Expr): object {
  return { $let: { vars: { a, b }, in: { $let: { vars: { q: floorDivExpr('$$a', '$$b') }, in: { $cond: [{ $lt: [{ $multiply: ['$$q', '$$b'] }, '$$a'] }, { $add: ['$$q', 1] }, '$$q'] } } } } };
}

/**
 * core/override.ts convertUnits(x, from, to, dir) for x >= 0: units of `from` a token into units of
 * `to` a token, exact where the scales divide, otherwise rounded against the caller ('up': a debt or a
 * charge, up; 'down': a refund, down), at most MAX_LIMIT_UNITS. A product past 2^53 is rounded, but it
 * is then above MAX_LIMIT_UNITS (2^52) either way, so the cap gives the exact answer.
 */
export function convertExpr(x: Expr, from: Expr, to: Expr, dir: 'up' | 'down'): object {
  const div = dir === 'up' ? ceilDivExpr : floorDivExpr;
  // One division for both inexact cases: by from / to (to divides from), else by from, times to (whole tokens).
  const divides = { $eq: [{ $mod: ['$$f', '$$t'] }, 0] };
  return {
    $let: {
      vars: { x, f: from, t: to },
      in: {
        $min: [
          MAX_LIMIT_UNITS,
          {
            $switch: {
              branches: [
                { case: { $eq: ['$$f', '$$t'] }, then: '$$x' },
                { case: { $eq: [{ $mod: ['$$t', '$$f'] }, 0] }, then: { $multiply: ['$$x', { $divide: ['$$t', '$$f'] }] } },
              ],
              default: { $multiply: [div('$$x', { $cond: [divides, { $divide: ['$$f', '$$t'] }, '$$f'] }), { $cond: [divides, 1, '$$t'] }] },
            },
          },
        ],
      },
    },
  };
}

/** A debt stored at atUs, at nowUs (core/gcra.ts decayed): stored - (now - at) * rate, at least 0. */
export function decayedExpr(debt: Expr, atUs: Expr, nowUs: Expr, refillUnitsPerUs: Expr): object {
  return { $max: [0, { $subtract: [debt, { $multiply: [{ $subtract: [nowUs, atUs] }, refillUnitsPerUs] }] }] };
}

/**
 * core/override.ts changeVersion of a policy-wide id expression (a string, or null or missing: 0): the
 * digits before its first '.', when there are 1 to 16 of them. $toDouble rounds as core's Number does.
 */
export function versionExpr(id: Expr): object {
  const found = { $regexFind: { input: { $ifNull: [id, ''] }, regex: '^([0-9]{1,16})\\.' } };
  return { $let: { vars: { m: found }, in: { $cond: [{ $eq: ['$$m', null] }, 0, { $toDouble: { $arrayElemAt: ['$$m.captures', 0] } }] } } };
}

/**
 * core/override.ts carryDebt(d, from, to, at, r), where the numbers differ by value (sameNumbers:
 * nothing to carry, d as it is): converted whole to the new token's units, rounded up; with a
 * reservation due at r after `at`, at least as the bucket will stand then (decayed under `from` to r
 * and carried, plus `to`'s refill until r); with r less than 1 ms before `at` or after it, from d plus
 * the refill counted since the slots of that ms (core lagUnits). `from` and `to` are expressions of limit objects, `r` 0 when none is stored.
 */
export function carryExpr(d: Expr, from: Expr, to: Expr, at: Expr, r: Expr): object {
  const same = { $and: ['tokenUnits', 'capacityUnits', 'refillUnitsPerUs'].map((k) => ({ $eq: [`$$f.${k}`, `$$t.${k}`] })) };
  const later = { $gt: ['$$r', '$$at'] };
  // `e`: d, plus the refill counted since the slots of the ms before `at` with a reservation due in it or
  // after (their callers may still come: core lagUnits): 1 ms of `from`'s, at most the capacity plus
  // the refill from that ms's start to the latest slot.
  const lag = { $and: [{ $gt: ['$$r', 0] }, { $gt: ['$$r', { $subtract: ['$$at', CALLER_LAG_US] }] }] };
  const span = { $add: [{ $subtract: [{ $min: ['$$r', '$$at'] }, '$$at'] }, CALLER_LAG_US] };
  const more = { $min: [{ $multiply: [CALLER_LAG_US, '$$f.refillUnitsPerUs'] }, { $add: ['$$f.capacityUnits', { $multiply: [span, '$$f.refillUnitsPerUs'] }] }] };
  const e = { $cond: [lag, { $max: ['$$d', { $min: [MAX_LIMIT_UNITS, { $add: ['$$d', more] }] }] }, '$$d'] };
  // The debt now and, with a reservation pending, as it stands at r: converted by the one expression
  // (an update's size is what the pipelines pay for).
  const c = { $map: { input: { $cond: [later, ['$$e', decayedExpr('$$e', '$$at', '$$r', '$$f.refillUnitsPerUs')], ['$$e']] }, as: 'x', in: convertExpr('$$x', '$$f.tokenUnits', '$$t.tokenUnits', 'up') } };
  const whole = { $arrayElemAt: ['$$c', 0] };
  const held = { $min: [MAX_LIMIT_UNITS, { $add: [{ $multiply: [{ $subtract: ['$$r', '$$at'] }, '$$t.refillUnitsPerUs'] }, { $arrayElemAt: ['$$c', 1] }] }] };
  const carried = { $let: { vars: { e }, in: { $let: { vars: { c }, in: { $cond: [later, { $max: [whole, held] }, whole] } } } } };
  return { $let: { vars: { d, f: from, t: to, at, r }, in: { $cond: [same, '$$d', carried] } } };
}

/**
 * core/gcra.ts dueOf: when a take that left each limit it charged at `after` is due, the latest moment
 * one of them has refilled to its capacity in force `cap` (whole µs, rounded up), or 0 when every one is
 * within it (due at once).
 */
export function dueExpr(limits: readonly { after: Expr; cap: Expr; refill: Expr }[], nowUs: Expr): object {
  const w = limits.map(({ after, cap, refill }) => ({ $cond: [{ $gt: [after, cap] }, ceilDivExpr({ $subtract: [after, cap] }, refill), 0] }));
  return { $let: { vars: { w: w.length === 1 ? w[0]! : { $max: w } }, in: { $cond: [{ $gt: ['$$w', 0] }, { $add: [nowUs, '$$w'] }, 0] } } };
}

/**
 * A limit's debt after a take due at `due` (0: at once) that charged it `cost`, as core/gcra.ts step
 * stores it for a take of several limits: at least the limit's refill until then plus the cost (at most
 * MAX_LIMIT_UNITS), as if taken at the due. A due of 0 needs no test: (0 - now) * refill + cost is at most
 * the cost, which `after` includes, so the debt stays `after`.
 */
export function atDueExpr(after: Expr, due: Expr, nowUs: Expr, refill: Expr, cost: Expr): object {
  return { $max: [after, { $min: [MAX_LIMIT_UNITS, { $add: [{ $multiply: [{ $subtract: [due, nowUs] }, refill] }, cost] }] }] };
}

/**
 * core/gcra.ts step's floor of a refund on a limit whose debt now is `d`: while a reservation is pending
 * or its caller may still come (due at `h`, after now less CALLER_LAG_US), the refill until then plus
 * the capacity `cap` (less the refill since), at most `d`; else (or with no capacity known: no
 * StepArgs.base) 0.
 */
export function refundFloorExpr(d: Expr, h: Expr, nowUs: Expr, refill: Expr, cap: Expr | undefined): Expr {
  if (cap === undefined) return 0;
  return { $cond: [{ $gt: [h, { $subtract: [nowUs, CALLER_LAG_US] }] }, { $max: [0, { $min: [d, { $add: [{ $multiply: [{ $subtract: [h, nowUs] }, refill] }, cap] }] }] }, 0] };
}
