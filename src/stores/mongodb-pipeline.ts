// The MQL of the MongoDB store's steps: the update pipeline that runs core/gcra.ts `step` on the server
// by $$NOW (one expression per limit, an operation id's record kept beside the bucket), the projections
// findOneAndUpdate returns, and the read-only pipeline of a peek. Pure: builds values, sends nothing.
import type { LimitStep, OpArgs } from '../core/gcra.js';
import { StoreError } from '../errors.js';
import type { StepArgs } from '../store.js';
import { atDueExpr, dueExpr, horizonUntil, keptHorizon, NOW_US, refundFloorExpr, RESERVED, storedDebt, type Expr } from './mongodb-mql.js';
import { expiryExpr, fullExpr, inForceExpr, type LimitParams, type RecordPlan } from './mongodb-override.js';

/**
 * Most operation records one bucket document holds. An operation id is remembered for its ttlMs or for
 * the last 1000 ids applied to that key, whichever ends first: a 1001st id younger than its ttl drops
 * the oldest record, and a retry of that oldest id applies again. (At about 0.5 KB a record, a full
 * array stays far below MongoDB's 16 MB document limit.)
 */
export const MAX_OPS_PER_BUCKET = 1000;

/** Limit i's debt now, as core/gcra.ts debtAt computes it, in the same operations: stored - (now - atUs) * rate, at least 0. */
function debtNow(i: number, nowUs: unknown, refillUnitsPerUs: number, seenUs = 0): object {
  const at = { $ifNull: ['$atUs', nowUs] };
  // (A bucket read before StepArgs.policySeenUs refills from then: core/override.ts stepWithRecord.)
  return { $max: [0, { $subtract: [storedDebt(i), { $multiply: [{ $subtract: [nowUs, seenUs > 0 ? { $cond: [{ $lt: [at, seenUs] }, { $min: [seenUs, nowUs] }, at] } : at] }, refillUnitsPerUs] }] }] };
}

/** The stored step's limits (at least one, at most a policy's 8: every per-limit expression below is unrolled). */
export function limitsOf(args: StepArgs): readonly LimitStep[] {
  const { limits } = args;
  if (!Array.isArray(limits) || limits.length === 0 || limits.length > 8) {
    throw new StoreError('mongodb', `a step needs 1 to 8 limits, got ${Array.isArray(limits) ? limits.length : typeof limits}`);
  }
  return limits;
}

/** An operation id's arguments, checked: its ttl in whole µs (rounded up). */
export function opOf(args: StepArgs): (OpArgs & { ttlUs: number }) | undefined {
  const { op } = args;
  if (op === undefined) return undefined;
  if (!op || typeof op.id !== 'string' || op.id.length === 0 || typeof op.fingerprint !== 'string' || !(Number.isFinite(op.ttlMs) && op.ttlMs > 0)) {
    throw new StoreError('mongodb', 'a step\'s op needs a non-empty string id, a string fingerprint and a positive ttlMs');
  }
  return { id: op.id, fingerprint: op.fingerprint, ttlMs: op.ttlMs, ttlUs: Math.ceil(op.ttlMs * 1000) };
}

/** -x, of a literal or an expression. */
const neg = (x: Expr): Expr => (typeof x === 'number' ? -x : { $multiply: [-1, x] });

/** Scratch field names, per limit: its debt now (before the step) and after it. */
const D = (i: number) => `_sD${i}`;
const A = (i: number) => `_sA${i}`;
/** A settlement's cost per limit (core/gcra.ts settledArgs: actual - charged). */
const C = (i: number) => `_sC${i}`;

/**
 * The update pipeline for one step (core/gcra.ts `step`, line by line, one expression per limit). Exported
 * so tests can run this exact value through an independent MQL engine. Fields starting with `_s` are
 * scratch and removed by the last stage. On a denial every field keeps its value, so the document stays
 * byte-identical and the server writes nothing. `callId` must be unique per call: finding it in `last`
 * afterwards is how the caller knows it was allowed. A peek (every cost 0) is sent as an update only to
 * write a record's change (see mongoStore's step); otherwise see peekPipeline.
 *
 * Without `plan`, a document that holds an override record (`ov`) is left byte-identical, as a denial
 * is, and the projection returns `ov`, so the caller sends the step again with the plan: a key with no
 * record pays one test for records, no more. With `plan` (mongodb-override.ts recordPlan) it is
 * core/override.ts `stepWithRecord`: a live block refuses a take, which takes nothing (an adjustment or a
 * settlement is applied, and reports the block); a policy-wide change is
 * installed, replaced or cleared; the step runs under the record's live numbers; the bucket is carried
 * and written with the record when the record changed; the expiry follows the record (mongodb-override.ts
 * expiryExpr); `last.limits` says which numbers were in force.
 *
 * With StepArgs.op, the same update also looks the id up among the document's live `ops` records (by
 * $$NOW, the step's own reading): found, every field keeps its value (a repeat writes nothing) and the
 * caller answers from the record (opProjection); not found, the step runs as without `op` and its result
 * is recorded, a denial's too, after dropping the expired records and keeping the newest
 * MAX_OPS_PER_BUCKET, with `opCall` set to `callId`. Without `op` the pipeline has no extra stage and no
 * op expression but one: `expiresAt` is never set before `opsUntil`.
 */
export function stepPipeline(args: StepArgs, callId: string, plan?: RecordPlan): object[] {
  const limits = limitsOf(args);
  const op = opOf(args);
  const idx = limits.map((_, i) => i);
  const { refundSinceUs, settle } = args;
  if (settle !== undefined && (!op || typeof settle.chargeId !== 'string')) throw new StoreError('mongodb', 'a settlement needs its own op and a string chargeId');
  const tokenUnits = args.tokenUnits === undefined ? undefined : (plan?.tokenUnits ?? args.tokenUnits);
  // A live block refuses takes (a peek, a reservation, a grant); an adjustment or a settlement is applied.
  const blocked: object[] = plan && !args.adjust && !settle ? [{ $not: ['$_sBlk'] }] : [];
  // An adjustment's result says the key is blocked (core's blockedUntilUs), as a refusal's does.
  const blockedUntil = { $cond: ['$_sBlk', '$_sN.blockedUntilUs', '$$REMOVE'] };
  // Each limit's numbers in this step: the step's own, or (with a record plan) expressions of the record.
  const param = (i: number): LimitParams => plan?.limit(i) ?? { cost: limits[i]!.costUnits, limit: limits[i]!.limitUnits, refill: limits[i]!.refillUnitsPerUs };
  const opId = op && { $literal: op.id };
  // Without a plan, a document holding an override record (`ov`) is left as it is, and the caller
  // resends the step with the plan (the projection returns `ov`): a key with no record pays one test.
  const hasRecord = { $ne: [{ $ifNull: ['$ov', null] }, null] };
  const live = { $gt: ['$$o.expiresAtUs', NOW_US] };
  // A settlement: its charge's live record (`_sCh`; a take's has chargedUnits, what it charged each limit).
  const charge = settle && { $ifNull: [{ $arrayElemAt: [{ $filter: { input: { $ifNull: ['$ops', []] }, as: 'o', cond: { $and: [live, { $eq: ['$$o.id', { $literal: settle.chargeId }] }] } } }, 0] }, null] };
  const stages: object[] = [
    // The store's clock in whole µs, and each limit's debt now, in its units. With an op: the records
    // not yet expired ($$NOW is one reading for the whole update), and whether this id is among them.
    { $set: op ? { _sNow: NOW_US, _sOps: { $filter: { input: { $ifNull: ['$ops', []] }, as: 'o', cond: live } }, ...(charge ? { _sCh: charge } : {}) } : { _sNow: NOW_US } },
    ...(plan ? plan.stages : []),
  ];
  const repeat = { $in: [opId, '$_sOps.id'] };
  // A settlement whose charge has no live take record (and that is no repeat): _sUnk; nothing is applied.
  const noCharge = { $not: [{ $isArray: '$_sCh.chargedUnits' }] };
  const debtsAndRepeat = {
    ...(plan ? {} : Object.fromEntries(idx.map((i) => [D(i), debtNow(i, '$_sNow', limits[i]!.refillUnitsPerUs, args.policySeenUs)]))),
    // _sRep: every field is kept as it is (a repeat; without a plan, a document with a record; a settlement's unknown charge).
    ...(op ? { _sRep: { $or: [...(plan ? [] : [hasRecord]), repeat, ...(settle ? [noCharge] : [])] } } : {}),
    ...(settle
      ? {
          _sUnk: { $and: [...(plan ? [] : [{ $not: [hasRecord] }]), { $not: [repeat] }, noCharge] },
          // In the step's own units (a charge records those, whatever numbers it ran under), then, as
          // core/override.ts argsUnder does, converted to the record's where it has live numbers.
          ...Object.fromEntries(
            idx.map((i) => {
              const diff = { $subtract: [limits[i]!.costUnits, { $ifNull: [{ $arrayElemAt: ['$_sCh.chargedUnits', i] }, 0] }] };
              return [C(i), plan ? plan.convert(i, diff) : diff];
            }),
          ),
        }
      : {}),
  };
  // (MongoDB refuses a $set of no field.)
  if (Object.keys(debtsAndRepeat).length > 0) stages.push({ $set: debtsAndRepeat });
  const scratch = ['_sNow', '_sOk', '_sFull', ...idx.map(D), ...idx.map(A), ...(op ? ['_sOps', '_sRep', '_sNew'] : []), ...(settle ? ['_sCh', '_sUnk', ...idx.map(C)] : []), ...(plan?.scratch ?? [])];
  // What a take charged each limit, in its units (its record's chargedUnits: 0 each when refused), or a settlement's charge's.
  let charged: unknown;
  // A settlement whose every cost is 0 (actual = charged) changes nothing, as core's peek: recorded, not written.
  let zero = plan?.zero;
  // Each limit's debt after the step, and whether the step is allowed.
  const after: object[] = idx.map((i) => `$${D(i)}` as unknown as object);
  let ok: object | boolean;
  let tokens: string | undefined;
  // A refund never below 0, nor below what a pending reservation holds (refundFloorExpr, core's step).
  const floor = (i: number) => refundFloorExpr(`$${D(i)}`, plan ? '$_sRk' : RESERVED, '$_sNow', param(i).refill, plan ? `$_sT${i}.capacityUnits` : args.base?.capacityUnits[i]);
  if (settle) {
    // A settlement (core/gcra.ts settledArgs), then adjust's rules: a refund (below 0) down to `floor`, a
    // charge never above limitUnits (a debt already above it is kept).
    for (const i of idx) {
      const [d, c, sum] = [`$${D(i)}`, `$${C(i)}`, { $add: [`$${D(i)}`, `$${C(i)}`] }];
      const limitUnits = param(i).limit;
      after[i] = { $cond: [{ $lt: [c, 0] }, { $max: [floor(i), sum] }, { $cond: [{ $gt: [sum, limitUnits] }, { $max: [d, limitUnits] }, sum] }] };
    }
    zero = { $and: idx.map((i) => ({ $eq: [`$${C(i)}`, 0] })) };
    ok = { $not: [zero] };
    charged = '$_sCh.chargedUnits';
  } else if (args.adjust) {
    // An adjustment, always applied (core/gcra.ts step): a refund down to `floor` (with refundSinceUs, by
    // what has not refilled since: refundUnitsAt); a charge never above limitUnits (a debt above is kept).
    for (const i of idx) {
      const { costUnits } = limits[i]!;
      const { cost, limit: limitUnits, refill: refillUnitsPerUs, refund } = param(i);
      const d = `$${D(i)}`;
      if (costUnits < 0) {
        const back =
          refund !== undefined
            ? refund
            : refundSinceUs === undefined
            ? neg(cost)
            : { $max: [0, { $subtract: [neg(cost), { $multiply: [{ $max: [0, { $subtract: ['$_sNow', refundSinceUs] }] }, refillUnitsPerUs] }] }] };
        after[i] = { $max: [floor(i), { $subtract: [d, back] }] };
      } else if (costUnits > 0) {
        after[i] = { $cond: [{ $gt: [{ $add: [d, cost] }, limitUnits] }, { $max: [d, limitUnits] }, { $add: [d, cost] }] };
      }
    }
    ok = true;
  } else if (tokenUnits !== undefined) {
    // A partial grant on limit 0 (see core/gcra.ts grantTokens): the floor, corrected by one either way, capped.
    // At most the tokens asked for: costUnits / tokenUnits of the step's own numbers (a record's
    // conversion of a whole number of tokens is that many of its tokens).
    const most = limits[0]!.costUnits / args.tokenUnits!;
    const limitUnits = param(0).limit;
    stages.push(
      { $set: { _sRoom: { $subtract: [limitUnits, `$${D(0)}`] } } },
      { $set: { _sK: { $floor: { $divide: ['$_sRoom', tokenUnits] } } } },
      {
        $set: {
          _sK: {
            $switch: {
              branches: [
                { case: { $gt: [{ $multiply: ['$_sK', tokenUnits] }, '$_sRoom'] }, then: { $subtract: ['$_sK', 1] } },
                { case: { $lte: [{ $multiply: [{ $add: ['$_sK', 1] }, tokenUnits] }, '$_sRoom'] }, then: { $add: ['$_sK', 1] } },
              ],
              default: '$_sK',
            },
          },
        },
      },
      { $set: { _sK: { $max: [0, { $min: [most, '$_sK'] }] } } },
    );
    scratch.push('_sRoom', '_sK');
    after[0] = { $add: [`$${D(0)}`, { $multiply: ['$_sK', tokenUnits] }] };
    ok = { $gt: ['$_sK', 0] };
    tokens = '$_sK';
    // (In the step's own units, core chargedUnitsOf: a settlement converts them as it converts its costs;
    // 0 when refused, as by a live block, which leaves _sK as the bucket had room for.)
    charged = [{ $cond: ['$_sOk', { $multiply: ['$_sK', args.tokenUnits!] }, 0] }];
  } else {
    // A take, all or nothing: every limit with a cost must stay within its limitUnits (one with cost 0 is
    // neither charged nor checked).
    // A negative cost (never sent by the limiter) is read as a refund, never below 0, as core does.
    for (const i of idx) {
      const c = param(i).cost;
      after[i] = limits[i]!.costUnits < 0 ? { $max: [0, { $add: [`$${D(i)}`, c] }] } : { $add: [`$${D(i)}`, c] };
    }
    ok = { $and: idx.filter((i) => limits[i]!.costUnits > 0).map((i) => ({ $lte: [`$${A(i)}`, param(i).limit] })) };
    charged = { $cond: ['$_sOk', idx.map((i) => Math.max(0, limits[i]!.costUnits)), idx.map(() => 0)] };
  }
  const afters = idx.map((i) => `$${A(i)}`);
  // `due`: when a take that leaves a limit it charged above its capacity in force is due (core/gcra.ts
  // dueOf), else 0. The capacities: the numbers in force with a plan, else StepArgs.base's (none without
  // it, as in core). A take with no wait (a record's numbers with base.maxWaitMs 0, its own with
  // limitUnits within them) never leaves one above, and pays for no expression of it.
  const charging = !settle && !args.adjust && args.tokenUnits === undefined ? idx.filter((i) => limits[i]!.costUnits > 0) : [];
  const caps = args.base?.capacityUnits;
  const waits = caps === undefined ? [] : charging.filter((i) => (plan && args.base!.maxWaitMs > 0) || limits[i]!.limitUnits > caps[i]!);
  const due: Expr = waits.length === 0 ? 0 : dueExpr(waits.map((i) => ({ after: `$${A(i)}`, cap: plan ? `$_sT${i}.capacityUnits` : caps![i]!, refill: param(i).refill })), '$_sNow');
  // Several limits: a take that reserves is due when its slowest limit allows (`_sDu`), and each limit it charges
  // counts it then, so one refilling sooner admits nothing on top of it (core step; a record's cost: after - before).
  const atDue = idx.length > 1 && due !== 0;
  // The stored reservation horizon while its caller may still come (what every write keeps, core stateAt), else 0.
  const kept = plan ? '$_sRk' : keptHorizon('$_sNow');
  // µs until each limit is full again.
  const fullAfterUs = idx.map((i) => ({ $ceil: { $divide: [`$${A(i)}`, param(i).refill] } }));
  // The document may go once every limit is full again (a missing document is a full bucket): the TTL
  // monitor only ever deletes later than this, never sooner. ceil(after / rate) is exact for integers
  // below 2^53 (a quotient that is no integer is never rounded onto one).
  // (And not before a reservation's caller may come: core CALLER_LAG_US after the horizon written.)
  const fullAt = { $toDate: { $ceil: { $divide: [{ $max: [{ $add: ['$_sNow', fullAfterUs.length === 1 ? fullAfterUs[0] : { $max: fullAfterUs }] }, horizonUntil(due === 0 ? kept : '$_sRv')] }, 1000] } } };
  stages.push(
    { $set: Object.fromEntries(idx.map((i) => [A(i), after[i]!])) },
    // _sFull: no limit is in debt after the step, nor a caller to come (kept). Then no bucket at all (debt and
    // atUs removed), as core/gcra.ts step deletes it: a full bucket stays full even if the clock goes back.
    // With an op, a repeat is never allowed: _sOk false keeps every bucket field as it is.
    // With a plan, a live block refuses a take (`_sBlk`), not an adjustment, and a step whose every cost
    // is 0 under the record (a late refund all refilled) is a peek, as core reads it: allowed, not written (`_sZero`).
    {
      $set: {
        _sOk: { $and: [...(op ? [{ $not: ['$_sRep'] }] : plan ? [] : [{ $not: [hasRecord] }]), ...(plan ? [...blocked, { $or: [zero!, ok] }] : [ok])] },
        _sFull: { $and: [...afters.map((a) => ({ $lte: [a, 0] })), { $eq: [kept, 0] }] },
        // Without a plan, the horizon an allowed take writes (with a plan: _sRv below).
        ...(atDue ? { _sDu: due } : !plan && due !== 0 ? { _sRv: { $max: [kept, due] } } : {}),
      },
    },
    ...(atDue ? [{ $set: { ...Object.fromEntries(charging.map((i) => [A(i), atDueExpr(`$${A(i)}`, '$_sDu', '$_sNow', param(i).refill, plan ? { $subtract: [`$${A(i)}`, `$${D(i)}`] } : param(i).cost)])), ...(plan ? {} : { _sRv: { $max: [kept, '$_sDu'] } }) } }] : []),
    ...(plan ? [{ $set: { _sStep: { $and: ['$_sOk', { $not: [zero!] }] } } }] : []),
  );
  // With a plan: nothing is written on a repeat (`keep`); the bucket is rewritten at now in the numbers
  // now in force, and the record with it, when the record changed (`_sW`), whatever the step did, a take
  // refused by a live block too (core/override.ts stepWithRecord).
  const keep = '$_sRep';
  if (plan) {
    // _sRv: the reservation horizon written with the bucket (0: none, or the bucket is full): the step's
    // (the later of the stored one and its own due) when it writes, else the stored one, carried.
    const rv = { $cond: ['$_sStep', { $cond: ['$_sFull', 0, { $max: [kept, atDue ? '$_sDu' : due] }] }, kept] };
    stages.push({ $set: { _sW: { $and: ['$_sChg', ...(op ? [{ $not: ['$_sRep'] }] : [])] }, _sRv: rv } });
    scratch.push('_sStep', '_sW', '_sRv');
  } else if (due !== 0) scratch.push('_sRv');
  if (atDue) scratch.push('_sDu');
  const inForce = plan ? inForceExpr(idx.length) : undefined;
  if (op) {
    // Not a repeat: the live records and this step's, the newest MAX_OPS_PER_BUCKET of them, and when
    // the latest of those expires. A denial's record holds the debts now, unchanged (core step's result).
    const record = {
      id: opId,
      fingerprint: { $literal: op.fingerprint },
      // A settlement that changes nothing is applied all the same (without a plan its _sOk is false).
      allowed: settle && !plan ? true : '$_sOk',
      debtUnits: { $cond: ['$_sOk', afters, idx.map((i) => `$${D(i)}`)] },
      // A block's refusal takes no tokens and says until when (core's result, which a repeat answers).
      ...(tokens ? { tokens: plan ? { $cond: ['$_sBlk', '$$REMOVE', tokens] } : tokens } : {}),
      ...(charged === undefined ? {} : { chargedUnits: charged }),
      ...(inForce ? { limits: inForce, blockedUntilUs: blockedUntil } : {}),
      atUs: '$_sNow',
      expiresAtUs: { $add: ['$_sNow', op.ttlUs] },
    };
    const kept = { $slice: [{ $concatArrays: ['$_sOps', [record]] }, -MAX_OPS_PER_BUCKET] };
    stages.push({
      $set: {
        _sNew: {
          $cond: [keep, null, { $let: { vars: { o: kept }, in: { ops: '$$o', until: { $toDate: { $ceil: { $divide: [{ $max: '$$o.expiresAtUs' }, 1000] } } } } } }],
        },
      },
    });
  }
  // A field that may be missing, made null for $max: MongoDB's $max skips null and missing arguments alike,
  // mingo's returns null for a missing one; both skip an explicit null.
  const orNull = (field: string) => ({ $ifNull: [field, null] });
  const ds = idx.map((i) => `$${D(i)}`);
  // Whether the step itself writes the bucket (with a plan, not a peek).
  const stepped = plan ? '$_sStep' : '$_sOk';
  const carried = (then: Expr, other: Expr) => (plan ? { $cond: ['$_sW', { $cond: [{ $and: [fullExpr(idx.length), { $eq: ['$_sRk', 0] }] }, '$$REMOVE', then] }, other] } : other);
  let expiresAt: object;
  if (!plan) {
    // Never before the latest operation record expires either (a retry needs it): without an op,
    // the stored opsUntil; with one, the new one (a repeat and a denial without op keep expiresAt).
    expiresAt = op
      ? { $cond: ['$_sRep', '$expiresAt', { $max: [{ $cond: ['$_sOk', fullAt, orNull('$expiresAt')] }, '$_sNew.until'] }] }
      : { $cond: ['$_sOk', { $max: [fullAt, orNull('$opsUntil')] }, '$expiresAt'] };
  } else {
    // Written: when the bucket is full under the expiry split, and no sooner than the record's ends
    // (never while it has numbers with no end), a key's copy or marker no sooner than policyHoldMs from
    // now. Not written but for an op record: no sooner than it, and still never if it had no expiry.
    const written = expiryExpr(plan.base, (i) => ({ $cond: ['$_sStep', `$${A(i)}`, `$${D(i)}`] }), op ? '$_sNew.until' : '$opsUntil', false, args.policyHoldMs ?? 0);
    const wrote = { $or: ['$_sStep', '$_sW'] };
    expiresAt = op
      ? { $cond: [keep, '$expiresAt', { $cond: [wrote, written, { $cond: [{ $eq: [orNull('$expiresAt'), null] }, '$$REMOVE', { $max: ['$expiresAt', '$_sNew.until'] }] }] }] }
      : { $cond: [wrote, written, '$expiresAt'] };
  }
  stages.push(
    {
      $set: {
        // A denial keeps each field as it is ('$field' of a missing field leaves it missing). A new
        // document is never denied by the limiter (each cost is at most its capacity).
        debt: { $cond: { if: stepped, then: { $cond: { if: '$_sFull', then: '$$REMOVE', else: afters } }, else: carried(ds, '$debt') } },
        atUs: { $cond: { if: stepped, then: { $cond: { if: '$_sFull', then: '$$REMOVE', else: '$_sNow' } }, else: carried('$_sNow', '$atUs') } },
        // Only while a reservation is pending (a plain key's document has no such field).
        reservedUntilUs: plan
          ? { $cond: [{ $or: ['$_sStep', '$_sW'] }, { $cond: [{ $gt: ['$_sRv', 0] }, '$_sRv', '$$REMOVE'] }, '$reservedUntilUs'] }
          : due === 0
            ? // (A missing field is missing either way: no $ifNull for it.)
              { $cond: [{ $and: ['$_sOk', { $or: ['$_sFull', { $eq: [kept, 0] }] }] }, '$$REMOVE', '$reservedUntilUs'] }
            : { $cond: ['$_sOk', { $cond: [{ $or: ['$_sFull', { $lte: ['$_sRv', 0] }] }, '$$REMOVE', '$_sRv'] }, '$reservedUntilUs'] },
        ...(plan ? { ov: { $cond: ['$_sW', { $ifNull: ['$_sN', '$$REMOVE'] }, '$ov'] } } : {}),
        expiresAt,
        last: {
          $cond: [
            '$_sOk',
            { id: { $literal: callId }, debtUnits: afters, atUs: '$_sNow', ...(tokens ? { tokens } : {}), ...(inForce ? { limits: inForce } : {}), ...(plan && args.adjust ? { blockedUntilUs: blockedUntil } : {}) },
            '$last',
          ],
        },
        ...(op
          ? {
              ops: { $cond: [keep, '$ops', '$_sNew.ops'] },
              opsUntil: { $cond: [keep, '$opsUntil', '$_sNew.until'] },
              // A settlement of an unknown charge marks the call ('!' + callId): the id's record that the
              // projection finds may be an expired one, which is no repeat.
              opCall: settle
                ? { $cond: ['$_sUnk', { $literal: `!${callId}` }, { $cond: [keep, '$opCall', { $literal: callId }] }] }
                : { $cond: [keep, '$opCall', { $literal: callId }] },
            }
          : {}),
      },
    },
    { $unset: scratch },
  );
  return stages;
}

/** Each limit's debt now (`d0`, `d1`, ...: one field per limit, so that a find projection only holds plain expressions). */
function debtsNowFields(limits: readonly LimitStep[], seenUs?: number): Record<string, object> {
  return Object.fromEntries(limits.map((l, i) => [`d${i}`, debtNow(i, NOW_US, l.refillUnitsPerUs, seenUs)]));
}

/**
 * What findOneAndUpdate returns: `last` (was this call applied, and the debts after it) and, for a
 * denial, each limit's debt now (`d0`, `d1`, ...) and `nowUs`. A projection may hold aggregation
 * expressions since MongoDB 4.4; on a denial the document is unchanged, so these read what the pipeline
 * read. Only a denial's reported numbers (retryAfterMs, remaining) come from this second reading of
 * $$NOW; the verdict does not.
 */
export function stepProjection(limits: readonly LimitStep[], seenUs?: number): object {
  return { _id: 0, last: 1, ...debtsNowFields(limits, seenUs), nowUs: NOW_US, ov: 1 };
}

/**
 * What findOneAndUpdate returns for a step with an operation id: `opCall` (this call's id when it
 * recorded the id, another's when the id was a repeat) and `op`, the id's record.
 */
export function opProjection(id: string): object {
  return { _id: 0, opCall: 1, op: { $arrayElemAt: [{ $filter: { input: '$ops', as: 'o', cond: { $eq: ['$$o.id', { $literal: id }] } } }, 0] }, ov: 1, nowUs: NOW_US };
}

/**
 * What findOneAndUpdate returns for a step with a record plan (and for Store.override): `last` (this
 * call's result when it wrote), the document's bucket, record and the clock reading, from which the
 * caller answers a refusal by core/override.ts (the document is then as the update read it, or carried
 * to now), and with an operation id what opProjection returns.
 */
export function recordProjection(opId?: string): object {
  return { ...(opId === undefined ? { _id: 0 } : opProjection(opId)), last: 1, debt: 1, atUs: 1, reservedUntilUs: 1, ov: 1, nowUs: NOW_US };
}

/**
 * The read-only pipeline for a peek: each limit's debt now (`b.d0`, `b.d1`, ...; no `b` when there is no
 * document: every limit full) and the clock reading `nowUs`, without writing or upserting. $facet makes
 * exactly one result document even when the key has none, and $$NOW is one reading for the whole pipeline.
 */
export function peekPipeline(key: string): object[] {
  return [
    { $match: { _id: { $eq: key } } },
    { $facet: { b: [{ $project: { _id: 0, debt: 1, atUs: 1, reservedUntilUs: 1, ov: 1 } }] } },
    { $project: { b: { $arrayElemAt: ['$b', 0] }, nowUs: NOW_US } },
  ];
}
