// MongoDB store: one findOneAndUpdate with an update pipeline per decision, timed by $$NOW.
// Buckets live in one collection, one document each: { _id: key, tat, expiresAt, last }.
// A denied step leaves the document byte-identical, so MongoDB writes nothing (no oplog entry) for it.
// The driver is never imported here: pass a driver Collection (the `mongodb` package), so that bundles
// that do not use this store never contain the driver.
import { ConfigError, StoreError } from '../errors.js';
import type { StepArgs, StepOptions, StepResult, Store } from '../store.js';

/**
 * A bucket document. `tat` is ms since the epoch (a double); `expiresAt` feeds the TTL index; `last` is
 * the most recent allowed step: its call id (so that call knows it was applied) and the debt after it.
 */
export interface BucketDocument {
  _id: string;
  tat?: number;
  expiresAt?: Date;
  /** `units`: the tokens a lease grant took (partial grants only). */
  last?: { id: string; debtMs: number; units?: number };
}

/** The part of the driver's Collection that the store uses. */
export interface MongoCollectionLike {
  findOneAndUpdate(filter: { _id: string }, update: object[], options: object): Promise<unknown>;
  /** The driver's aggregate accepts `signal` (Abortable) and `maxTimeMS`. */
  aggregate(pipeline: object[], options?: object): { toArray(): Promise<unknown[]> };
  deleteOne(filter: { _id: string }): Promise<unknown>;
  createIndex(spec: Record<string, 1 | -1>, options: object): Promise<unknown>;
  /** The driver's Collection has `.db`; ping runs against it when present. */
  readonly db?: { command(cmd: object): Promise<unknown> };
}

export interface MongoStoreOptions {
  /** A driver Collection, e.g. `client.db('app').collection('token_buckets')`. */
  collection: MongoCollectionLike;
  /**
   * Server-side bound on each operation, in ms (maxTimeMS); a limiter call's own timeoutMs lowers it.
   * The client side is bounded by the MongoClient's socketTimeoutMS / waitQueueTimeoutMS, which the
   * entries' store factory sets from the policies' timeouts. @default 1000
   */
  maxTimeMS?: number;
}

export interface MongoStore extends Store {
  /** Creates the TTL index on `expiresAt` (expireAfterSeconds: 0). Idempotent; call it once at deploy or start. */
  ensureIndexes(): Promise<void>;
}

/**
 * The update pipeline for one step. Exported so tests can run this exact value through an independent
 * MQL engine. Fields starting with `_s` are scratch and removed by the last stage. On a denial every
 * field keeps its value, so the document stays byte-identical and the server writes nothing.
 * `callId` must be unique per call: finding it in `last` afterwards is how the caller knows it was allowed.
 */
export function stepPipeline(args: StepArgs, callId: string): object[] {
  const { costMs, limitMs, unitMs } = args;
  const stages: object[] = [
    // The store's clock, as ms since the epoch (double), and the bucket's debt in ms.
    { $set: { _sNow: { $toDouble: '$$NOW' } } },
    { $set: { _sDebt: { $max: [0, { $subtract: [{ $ifNull: ['$tat', 0] }, '$_sNow'] }] } } },
  ];
  // The debt after the step, and whether it is allowed.
  let debtAfter: object;
  let ok: object | boolean;
  let units: string | undefined;
  if (costMs < 0) {
    // A refund: the debt falls, never below 0 (a bucket is never fuller than full). Always allowed.
    debtAfter = { $max: [0, { $add: ['$_sDebt', costMs] }] };
    ok = true;
  } else if (unitMs !== undefined) {
    // A partial grant (see core/gcra.ts grantUnits): the floor, then one correction each way.
    const most = Math.round(costMs / unitMs);
    const fits = (k: unknown) => ({ $lte: [{ $add: ['$_sDebt', { $multiply: [k, unitMs] }] }, limitMs] });
    stages.push(
      { $set: { _sK: { $min: [most, { $floor: { $divide: [{ $subtract: [limitMs, '$_sDebt'] }, unitMs] } }] } } },
      { $set: { _sK: { $cond: [{ $and: [{ $lt: ['$_sK', most] }, fits({ $add: ['$_sK', 1] })] }, { $add: ['$_sK', 1] }, '$_sK'] } } },
      { $set: { _sK: { $cond: [{ $and: [{ $gt: ['$_sK', 0] }, { $not: [fits('$_sK')] }] }, { $subtract: ['$_sK', 1] }, '$_sK'] } } },
      { $set: { _sK: { $max: [0, '$_sK'] } } },
    );
    debtAfter = { $add: ['$_sDebt', { $multiply: ['$_sK', unitMs] }] };
    ok = { $gt: ['$_sK', 0] };
    units = '$_sK';
  } else {
    debtAfter = { $add: ['$_sDebt', costMs] };
    ok = { $lte: [{ $add: ['$_sDebt', costMs] }, limitMs] };
  }
  const after = { $add: ['$_sNow', '$_sDebt', costMs] };
  const tatAfter = costMs >= 0 && unitMs === undefined ? after : { $add: ['$_sNow', debtAfter] };
  stages.push(
    { $set: { _sOk: ok } },
    {
      $set: {
        // A denial keeps each field as it is ('$field' of a missing field leaves it missing). A new
        // document is never denied (cost <= capacity).
        tat: { $cond: ['$_sOk', tatAfter, '$tat'] },
        // The document may go once the bucket is full again; a missing document is a full bucket.
        expiresAt: { $cond: ['$_sOk', { $toDate: { $ceil: tatAfter } }, '$expiresAt'] },
        last: {
          $cond: ['$_sOk', { id: { $literal: callId }, debtMs: debtAfter, ...(units ? { units } : {}) }, '$last'],
        },
      },
    },
    { $unset: units ? ['_sNow', '_sDebt', '_sOk', '_sK'] : ['_sNow', '_sDebt', '_sOk'] },
  );
  return stages;
}

/**
 * What findOneAndUpdate returns: `last` (was this call applied, and the debt after it) and, for a
 * denial, the debt now. A projection may hold aggregation expressions since MongoDB 4.4. Only a denial's
 * reported numbers (retryAfterMs, remaining) come from this second reading of $$NOW; the verdict does not.
 */
export const STEP_PROJECTION = {
  _id: 0,
  last: 1,
  debtNowMs: { $max: [0, { $subtract: [{ $ifNull: ['$tat', 0] }, { $toDouble: '$$NOW' }] }] },
} as const;

/** The read-only pipeline for a peek: the debt now, without writing or upserting. */
export function peekPipeline(key: string): object[] {
  return [
    { $match: { _id: { $eq: key } } },
    { $project: { _id: 0, debtMs: { $max: [0, { $subtract: [{ $ifNull: ['$tat', 0] }, { $toDouble: '$$NOW' }] }] } } },
  ];
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The filter can only ever be `{ _id: <string> }`: a non-string key would be an operator injection. */
function idFilter(key: unknown): { _id: string } {
  if (typeof key !== 'string' || key.length === 0) {
    throw new StoreError('mongodb', `refused a non-string key (${key === null ? 'null' : typeof key})`);
  }
  return { _id: key };
}

/** A prefix unique to this store instance plus a counter: unique per call without a random draw each time. */
function callIds(): () => string {
  const bytes = new Uint8Array(9);
  crypto.getRandomValues(bytes);
  const prefix = btoa(String.fromCharCode(...bytes));
  let n = 0;
  return () => `${prefix}${(n++).toString(36)}`;
}

export function mongoStore(options: MongoStoreOptions): MongoStore {
  if (!options || typeof options !== 'object' || !options.collection) throw new ConfigError('collection', 'is required');
  const { collection } = options;
  const maxTimeMS = options.maxTimeMS ?? 1000;
  if (!Number.isInteger(maxTimeMS) || maxTimeMS < 1) throw new ConfigError('maxTimeMS', `must be a positive integer, got ${String(maxTimeMS)}`);
  const nextCallId = callIds();

  async function step(key: string, args: StepArgs, stepOptions: StepOptions = {}): Promise<StepResult> {
    const filter = idFilter(key);
    const opTimeMS = stepOptions.timeoutMs === undefined ? maxTimeMS : Math.max(1, Math.min(maxTimeMS, Math.ceil(stepOptions.timeoutMs)));
    if (args.costMs === 0) {
      const aggOptions = stepOptions.signal ? { maxTimeMS: opTimeMS, signal: stepOptions.signal } : { maxTimeMS: opTimeMS };
      const docs = await collection.aggregate(peekPipeline(filter._id), aggOptions).toArray();
      const debtMs = Number((docs[0] as { debtMs?: unknown } | undefined)?.debtMs ?? 0);
      return { allowed: true, debtMs };
    }
    const callId = nextCallId();
    const update = stepPipeline(args, callId);
    const findOptions = { upsert: true, returnDocument: 'after', projection: STEP_PROJECTION, maxTimeMS: opTimeMS };
    let doc: unknown;
    try {
      doc = await collection.findOneAndUpdate(filter, update, findOptions);
    } catch (err) {
      // Two first decisions on one new bucket can race to insert it; the loser retries as an update.
      if ((err as { code?: unknown }).code !== 11000 || stepOptions.signal?.aborted) throw err;
      doc = await collection.findOneAndUpdate(filter, update, findOptions);
    }
    const d = doc as { last?: { id?: unknown; debtMs?: unknown; units?: unknown }; debtNowMs?: unknown } | null;
    const withUnits = args.unitMs !== undefined && args.costMs > 0;
    if (d && d.last?.id === callId && typeof d.last.debtMs === 'number') {
      return withUnits ? { allowed: true, debtMs: d.last.debtMs, units: Number(d.last.units) } : { allowed: true, debtMs: d.last.debtMs };
    }
    if (d && typeof d.debtNowMs === 'number') return withUnits ? { allowed: false, debtMs: d.debtNowMs, units: 0 } : { allowed: false, debtMs: d.debtNowMs };
    throw new Error(`unexpected findOneAndUpdate result ${JSON.stringify(doc)?.slice(0, 120)}`);
  }

  return {
    name: 'mongodb',
    async step(key, args, stepOptions) {
      try {
        return await step(key, args, stepOptions);
      } catch (err) {
        if (err instanceof StoreError) throw err;
        throw new StoreError('mongodb', message(err), { cause: err });
      }
    },
    async reset(key) {
      const filter = idFilter(key);
      try {
        await collection.deleteOne(filter);
      } catch (err) {
        throw new StoreError('mongodb', `deleteOne failed: ${message(err)}`, { cause: err });
      }
    },
    async ping() {
      try {
        if (collection.db) await collection.db.command({ ping: 1 });
        else await collection.aggregate([{ $limit: 1 }], { maxTimeMS }).toArray();
      } catch (err) {
        throw new StoreError('mongodb', `ping failed: ${message(err)}`, { cause: err });
      }
    },
    async ensureIndexes() {
      try {
        await collection.createIndex({ expiresAt: 1 }, { expireAfterSeconds: 0, name: 'expiresAt_ttl' });
      } catch (err) {
        throw new StoreError('mongodb', `createIndex failed: ${message(err)}`, { cause: err });
      }
    },
  };
}
