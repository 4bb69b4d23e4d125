// MongoDB store: one findOneAndUpdate with an update pipeline per decision, timed by $$NOW.
// Buckets live in one collection, one document each: { _id: key, tat, expiresAt }.
// The driver is never imported here: pass a driver Collection (the `mongodb` package), so that bundles
// that do not use this store never contain the driver.
import { ConfigError, StoreError } from '../errors.js';
import type { StepArgs, StepResult, Store } from '../store.js';

/** A bucket document. `tat` is ms since the epoch (a double); `expiresAt` feeds the TTL index. */
export interface BucketDocument {
  _id: string;
  tat?: number;
  expiresAt?: Date;
  allowed?: boolean;
  debtMs?: number;
}

/** The part of the driver's Collection that the store uses. */
export interface MongoCollectionLike {
  findOneAndUpdate(filter: { _id: string }, update: object[], options: object): Promise<unknown>;
  aggregate(pipeline: object[], options?: object): { toArray(): Promise<unknown[]> };
  deleteOne(filter: { _id: string }): Promise<unknown>;
  createIndex(spec: Record<string, 1 | -1>, options: object): Promise<unknown>;
  /** The driver's Collection has `.db`; ping runs against it when present. */
  readonly db?: { command(cmd: object): Promise<unknown> };
}

export interface MongoStoreOptions {
  /** A driver Collection, e.g. `client.db('app').collection('token_buckets')`. */
  collection: MongoCollectionLike;
  /** Server-side bound on each operation, in ms (maxTimeMS). @default 1000 */
  maxTimeMS?: number;
}

export interface MongoStore extends Store {
  /** Creates the TTL index on `expiresAt` (expireAfterSeconds: 0). Idempotent; call it once at deploy or start. */
  ensureIndexes(): Promise<void>;
}

/**
 * The update pipeline for one step. Exported so tests can run this exact value through an
 * independent MQL engine. Fields starting with `_s` are scratch and removed by the last stage.
 */
export function stepPipeline(args: StepArgs): object[] {
  const { costMs, limitMs } = args;
  return [
    // The store's clock, as ms since the epoch (double), and the bucket's debt in ms.
    { $set: { _sNow: { $toDouble: '$$NOW' } } },
    { $set: { _sDebt: { $max: [0, { $subtract: [{ $ifNull: ['$tat', 0] }, '$_sNow'] }] } } },
    { $set: { _sOk: { $lte: [{ $add: ['$_sDebt', costMs] }, limitMs] } } },
    {
      $set: {
        allowed: '$_sOk',
        debtMs: { $cond: ['$_sOk', { $add: ['$_sDebt', costMs] }, '$_sDebt'] },
        // A denied step leaves tat as it was; a new document is never denied (cost <= capacity).
        tat: { $cond: ['$_sOk', { $add: ['$_sNow', '$_sDebt', costMs] }, { $ifNull: ['$tat', '$_sNow'] }] },
        // The document may go once the bucket is full again; a missing document is a full bucket.
        expiresAt: {
          $cond: [
            '$_sOk',
            { $toDate: { $ceil: { $add: ['$_sNow', '$_sDebt', costMs] } } },
            { $ifNull: ['$expiresAt', '$$NOW'] },
          ],
        },
      },
    },
    { $unset: ['_sNow', '_sDebt', '_sOk'] },
  ];
}

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

export function mongoStore(options: MongoStoreOptions): MongoStore {
  if (!options || typeof options !== 'object' || !options.collection) throw new ConfigError('collection', 'is required');
  const { collection } = options;
  const maxTimeMS = options.maxTimeMS ?? 1000;

  async function step(key: string, args: StepArgs): Promise<StepResult> {
    const filter = idFilter(key);
    if (args.costMs === 0) {
      const docs = await collection.aggregate(peekPipeline(filter._id), { maxTimeMS }).toArray();
      const debtMs = Number((docs[0] as { debtMs?: unknown } | undefined)?.debtMs ?? 0);
      return { allowed: true, debtMs };
    }
    const update = stepPipeline(args);
    const findOptions = { upsert: true, returnDocument: 'after', projection: { _id: 0, allowed: 1, debtMs: 1 }, maxTimeMS };
    let doc: unknown;
    try {
      doc = await collection.findOneAndUpdate(filter, update, findOptions);
    } catch (err) {
      // Two first decisions on one new bucket can race to insert it; the loser retries as an update.
      if ((err as { code?: unknown }).code !== 11000) throw err;
      doc = await collection.findOneAndUpdate(filter, update, findOptions);
    }
    const d = doc as { allowed?: unknown; debtMs?: unknown } | null;
    if (!d || typeof d.allowed !== 'boolean' || typeof d.debtMs !== 'number') {
      throw new Error(`unexpected findOneAndUpdate result ${JSON.stringify(doc)?.slice(0, 120)}`);
    }
    return { allowed: d.allowed, debtMs: d.debtMs };
  }

  return {
    name: 'mongodb',
    async step(key, args) {
      try {
        return await step(key, args);
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
