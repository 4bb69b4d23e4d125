// MongoDB store: one findOneAndUpdate with an update pipeline per decision, timed by $$NOW.
// Buckets live in one collection, one document each: { _id: key, debt, atUs, expiresAt, last }.
// A denied step leaves the document byte-identical, so MongoDB writes nothing (no oplog entry) for it.
// The driver is never imported here: pass a driver Collection (the `mongodb` package), so that bundles
// that do not use this store never contain the driver.
import { ConfigError, StoreError } from '../errors.js';
import type { StepArgs, StepOptions, StepResult, Store } from '../store.js';

/**
 * A bucket document. `debt` is the debt in units at `atUs`, the server clock's reading in whole µs
 * (both integers below 2^53, stored as doubles: exact); `expiresAt` feeds the TTL index; `last` is the
 * most recent allowed step: its call id (so that call knows it was applied) and the debt after it.
 */
export interface BucketDocument {
  _id: string;
  debt?: number;
  atUs?: number;
  expiresAt?: Date;
  /** `tokens`: the tokens a lease grant took (partial grants only). */
  last?: { id: string; debtUnits: number; tokens?: number };
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

/** $$NOW as whole µs (a double: exact, below 2^53). */
const NOW_US = { $multiply: [{ $toDouble: '$$NOW' }, 1000] };

/**
 * The debt now of the document's bucket, as core/gcra.ts debtAt computes it, in the same operations:
 * debt - (now - atUs) * rate, at least 0. No document (no debt) is a full bucket.
 */
function debtNow(nowUs: unknown, refillUnitsPerUs: number): object {
  return { $max: [0, { $subtract: [{ $ifNull: ['$debt', 0] }, { $multiply: [{ $subtract: [nowUs, { $ifNull: ['$atUs', nowUs] }] }, refillUnitsPerUs] }] }] };
}

/**
 * The update pipeline for one step. Exported so tests can run this exact value through an independent
 * MQL engine. Fields starting with `_s` are scratch and removed by the last stage. On a denial every
 * field keeps its value, so the document stays byte-identical and the server writes nothing.
 * `callId` must be unique per call: finding it in `last` afterwards is how the caller knows it was allowed.
 */
export function stepPipeline(args: StepArgs, callId: string): object[] {
  const { costUnits, limitUnits, tokenUnits, refillUnitsPerUs, refundSinceUs } = args;
  const stages: object[] = [
    // The store's clock in whole µs, and the bucket's debt in units.
    { $set: { _sNow: NOW_US } },
    { $set: { _sDebt: debtNow('$_sNow', refillUnitsPerUs) } },
  ];
  // The debt after the step, and whether it is allowed.
  let debtAfter: object;
  let ok: object | boolean;
  let tokens: string | undefined;
  if (costUnits < 0) {
    // A refund: the debt falls, never below 0 (a bucket is never fuller than full). Always allowed. With
    // refundSinceUs, by what the bucket has not refilled since then (core/gcra.ts refundUnitsAt).
    const back =
      refundSinceUs === undefined
        ? -costUnits
        : { $max: [0, { $subtract: [-costUnits, { $multiply: [{ $max: [0, { $subtract: ['$_sNow', refundSinceUs] }] }, refillUnitsPerUs] }] }] };
    debtAfter = { $max: [0, { $subtract: ['$_sDebt', back] }] };
    ok = true;
  } else if (tokenUnits !== undefined) {
    // A partial grant (see core/gcra.ts grantTokens): the floor, corrected by one either way, capped.
    const most = costUnits / tokenUnits;
    stages.push(
      { $set: { _sRoom: { $subtract: [limitUnits, '$_sDebt'] } } },
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
    debtAfter = { $add: ['$_sDebt', { $multiply: ['$_sK', tokenUnits] }] };
    ok = { $gt: ['$_sK', 0] };
    tokens = '$_sK';
  } else {
    debtAfter = { $add: ['$_sDebt', costUnits] };
    ok = { $lte: [debtAfter, limitUnits] };
  }
  stages.push(
    { $set: { _sOk: ok, _sAfter: debtAfter } },
    {
      $set: {
        // A denial keeps each field as it is ('$field' of a missing field leaves it missing). A new
        // document is never denied (cost <= capacity).
        debt: { $cond: ['$_sOk', '$_sAfter', '$debt'] },
        atUs: { $cond: ['$_sOk', '$_sNow', '$atUs'] },
        // The document may go once the bucket is full again (a missing document is a full bucket): the
        // TTL monitor only ever deletes later than this, never sooner.
        expiresAt: {
          $cond: ['$_sOk', { $toDate: { $ceil: { $divide: [{ $add: ['$_sNow', { $divide: ['$_sAfter', refillUnitsPerUs] }] }, 1000] } } }, '$expiresAt'],
        },
        last: {
          $cond: ['$_sOk', { id: { $literal: callId }, debtUnits: '$_sAfter', atUs: '$_sNow', ...(tokens ? { tokens } : {}) }, '$last'],
        },
      },
    },
    { $unset: tokens ? ['_sNow', '_sDebt', '_sOk', '_sAfter', '_sRoom', '_sK'] : ['_sNow', '_sDebt', '_sOk', '_sAfter'] },
  );
  return stages;
}

/**
 * What findOneAndUpdate returns: `last` (was this call applied, and the debt after it) and, for a
 * denial, the debt now. A projection may hold aggregation expressions since MongoDB 4.4. Only a denial's
 * reported numbers (retryAfterMs, remaining) come from this second reading of $$NOW; the verdict does not.
 */
export function stepProjection(refillUnitsPerUs: number): object {
  return { _id: 0, last: 1, debtNowUnits: debtNow(NOW_US, refillUnitsPerUs), nowUs: NOW_US };
}

/** The read-only pipeline for a peek: the debt now, without writing or upserting. */
export function peekPipeline(key: string, refillUnitsPerUs: number): object[] {
  return [{ $match: { _id: { $eq: key } } }, { $project: { _id: 0, debtUnits: debtNow(NOW_US, refillUnitsPerUs) } }];
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
    if (args.costUnits === 0) {
      const aggOptions = stepOptions.signal ? { maxTimeMS: opTimeMS, signal: stepOptions.signal } : { maxTimeMS: opTimeMS };
      const docs = await collection.aggregate(peekPipeline(filter._id, args.refillUnitsPerUs), aggOptions).toArray();
      const debtUnits = Number((docs[0] as { debtUnits?: unknown } | undefined)?.debtUnits ?? 0);
      return { allowed: true, debtUnits };
    }
    const callId = nextCallId();
    const update = stepPipeline(args, callId);
    const findOptions = { upsert: true, returnDocument: 'after', projection: stepProjection(args.refillUnitsPerUs), maxTimeMS: opTimeMS };
    let doc: unknown;
    try {
      doc = await collection.findOneAndUpdate(filter, update, findOptions);
    } catch (err) {
      // Two first decisions on one new bucket can race to insert it; the loser retries as an update.
      if ((err as { code?: unknown }).code !== 11000 || stepOptions.signal?.aborted) throw err;
      doc = await collection.findOneAndUpdate(filter, update, findOptions);
    }
    const d = doc as { last?: { id?: unknown; debtUnits?: unknown; tokens?: unknown; atUs?: unknown }; debtNowUnits?: unknown; nowUs?: unknown } | null;
    const withTokens = args.tokenUnits !== undefined && args.costUnits > 0;
    if (d && d.last?.id === callId && typeof d.last.debtUnits === 'number') {
      const atUs = Number(d.last.atUs);
      return withTokens ? { allowed: true, debtUnits: d.last.debtUnits, tokens: Number(d.last.tokens), atUs } : { allowed: true, debtUnits: d.last.debtUnits, atUs };
    }
    if (d && typeof d.debtNowUnits === 'number') {
      const atUs = Number(d.nowUs);
      return withTokens ? { allowed: false, debtUnits: d.debtNowUnits, tokens: 0, atUs } : { allowed: false, debtUnits: d.debtNowUnits, atUs };
    }
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
