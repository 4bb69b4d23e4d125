// MongoDB store: one findOneAndUpdate with an update pipeline per decision, timed by $$NOW.
// Buckets live in one collection, one document each: { _id: key, debt: [debt per limit], atUs, expiresAt, last }
// (no debt and atUs when every limit is full), plus { ops, opsUntil, opCall } once an operation id was applied.
// A denied step leaves the document byte-identical, so MongoDB writes nothing (no oplog entry) for it; so
// does a repeated operation id, and a denied step with a new id writes only that id's record.
// The driver is never imported here: pass a driver Collection (the `mongodb` package), so that bundles
// that do not use this store never contain the driver.
import { ConfigError, StoreError } from '../errors.js';
import type { StepArgs, StepOptions, StepResult, Store } from '../store.js';
import { repeatOf, step as coreStep, type OpRecord } from '../core/gcra.js';
import { limitsOf, opProjection, peekPipeline, stepPipeline, stepProjection } from './mongodb-pipeline.js';

export { MAX_OPS_PER_BUCKET, opProjection, peekPipeline, stepPipeline, stepProjection } from './mongodb-pipeline.js';

/**
 * A bucket document. `debt` holds each limit's debt in its units, in the policy's order, at `atUs`, the
 * server clock's reading in whole µs (all integers below 2^53, stored as numbers: exact); both are
 * absent when a step left every limit full (a full bucket, as if there were no document). `expiresAt`
 * feeds the TTL index (every limit is full again by then); `last` is the most recent allowed step: its
 * call id (so that call knows it was applied), the debts after it and the clock reading.
 * A document written before policies had several limits holds `debt` as one number: it reads as the
 * debt of the first limit (the others full), and the next allowed step rewrites it as an array.
 */
export interface BucketDocument {
  _id: string;
  debt?: number[] | number;
  atUs?: number;
  expiresAt?: Date;
  /** `tokens`: the tokens a lease grant took (partial grants only). */
  last?: { id: string; debtUnits: number[]; atUs: number; tokens?: number };
  /**
   * The operation ids (StepArgs.op) applied to this key, oldest first: each one's step result, its
   * request's fingerprint and when it expires (`expiresAtUs`, the server clock in whole µs). Every step
   * that records an id first drops the expired ones, then keeps the newest MAX_OPS_PER_BUCKET.
   */
  ops?: OpRecordDocument[];
  /** When the latest of `ops` expires (a Date, ms rounded up): `expiresAt` is never before it. */
  opsUntil?: Date;
  /** The call id of the step that last recorded an operation id (how that call knows it was not a repeat). */
  opCall?: string;
}

/** One operation id's record in BucketDocument.ops. */
export interface OpRecordDocument {
  id: string;
  fingerprint: string;
  allowed: boolean;
  /** The debts the step reported: after it when allowed, unchanged (at atUs) when denied. */
  debtUnits: number[];
  /** A partial grant's tokens (0 when denied). */
  tokens?: number;
  atUs: number;
  /** atUs + ttlMs * 1000: the record is live while the server clock is before it. */
  expiresAtUs: number;
}

/** The part of the driver's Collection that the store uses. */
export interface MongoCollectionLike {
  findOneAndUpdate(filter: { _id: string }, update: object[], options: object): Promise<unknown>;
  /** The driver's aggregate accepts `signal` (Abortable) and `maxTimeMS`. */
  aggregate(pipeline: object[], options?: object): { toArray(): Promise<unknown[]> };
  deleteOne(filter: { _id: string }): Promise<unknown>;
  createIndex(spec: Record<string, 1 | -1>, options: object): Promise<unknown>;
  /** The driver's Collection has `.db`; ping runs against it when present, and closeClient closes its `client`. */
  readonly db?: { command(cmd: object): Promise<unknown>; readonly client?: { close(): Promise<unknown> } };
}

/** Options of mongoStore. */
export interface MongoStoreOptions {
  /** A driver Collection, e.g. `client.db('app').collection('token_buckets')`. */
  collection: MongoCollectionLike;
  /**
   * Server-side bound on each operation, in ms (maxTimeMS); a limiter call's own timeoutMs lowers it.
   * The client side is bounded by the MongoClient's socketTimeoutMS / waitQueueTimeoutMS, which the
   * entries' store factory sets from the policies' timeouts. @default 1000
   */
  maxTimeMS?: number;
  /**
   * The store owns the MongoClient the collection belongs to (`collection.db.client`): its `close()`,
   * which the limiter's `close()` calls, closes that client, so a Node script exits once its work is done.
   * Only for a client nothing else uses. @default false (the caller closes the client)
   */
  closeClient?: boolean;
}

/** The MongoDB store: a Store that can also create its TTL index. */
export interface MongoStore extends Store {
  /** Creates the TTL index on `expiresAt` (expireAfterSeconds: 0). Idempotent; call it once at deploy or start. */
  ensureIndexes(): Promise<void>;
}

/** A record as the projection returned it, checked, as core's OpRecord. */
function readOpRecord(rec: unknown): OpRecord | undefined {
  const r = rec as Partial<OpRecordDocument> | null | undefined;
  if (!r || typeof r.allowed !== 'boolean' || typeof r.atUs !== 'number' || typeof r.fingerprint !== 'string') return undefined;
  if (!Array.isArray(r.debtUnits) || !r.debtUnits.every((u) => typeof u === 'number')) return undefined;
  const out: OpRecord = { allowed: r.allowed, debtUnits: r.debtUnits, atUs: r.atUs, fingerprint: r.fingerprint };
  if (typeof r.tokens === 'number') out.tokens = r.tokens;
  return out;
}

/** Each limit's debt from the d0, d1, ... fields of a projection (a missing one: no document, 0). */
function readDebts(fields: Record<string, unknown> | undefined, n: number): number[] | undefined {
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) {
    const v = fields?.[`d${i}`] ?? 0;
    if (typeof v !== 'number') return undefined;
    out[i] = v;
  }
  return out;
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

/** A store in a MongoDB collection, one document per bucket: each decision is one findOneAndUpdate with an update pipeline, timed by $$NOW; a refusal writes nothing. */
export function mongoStore(options: MongoStoreOptions): MongoStore {
  if (!options || typeof options !== 'object' || !options.collection) throw new ConfigError('collection', 'is required');
  const { collection } = options;
  const maxTimeMS = options.maxTimeMS ?? 1000;
  if (!Number.isInteger(maxTimeMS) || maxTimeMS < 1) throw new ConfigError('maxTimeMS', `must be a positive integer, got ${String(maxTimeMS)}`);
  const nextCallId = callIds();
  const client = options.closeClient ? collection.db?.client : undefined;
  if (options.closeClient && typeof client?.close !== 'function') throw new ConfigError('closeClient', 'needs a driver Collection, whose db.client the store can close');
  let closed: Promise<void> | undefined;

  async function step(key: string, args: StepArgs, stepOptions: StepOptions = {}): Promise<StepResult> {
    const filter = idFilter(key);
    const limits = limitsOf(args);
    const n = limits.length;
    const opTimeMS = stepOptions.timeoutMs === undefined ? maxTimeMS : Math.max(1, Math.min(maxTimeMS, Math.ceil(stepOptions.timeoutMs)));
    if (limits.every((l) => l.costUnits === 0)) {
      // A peek (core/gcra.ts step: every cost 0): read only, never an upsert.
      const aggOptions = stepOptions.signal ? { maxTimeMS: opTimeMS, signal: stepOptions.signal } : { maxTimeMS: opTimeMS };
      const docs = await collection.aggregate(peekPipeline(filter._id), aggOptions).toArray();
      const d = docs[0] as { b?: { debt?: unknown; atUs?: unknown }; nowUs?: unknown } | undefined;
      if (typeof d?.nowUs !== 'number') throw new Error(`unexpected aggregate result ${JSON.stringify(docs)?.slice(0, 120)}`);
      // The stored debts and their reading, decayed to the one reading of $$NOW here by core's own
      // arithmetic (the same integers the pipeline uses), so the debts and atUs reported always agree.
      const { debt, atUs } = d.b ?? {};
      const stored = typeof debt === 'number' ? [debt] : Array.isArray(debt) && debt.every((x) => typeof x === 'number') ? (debt as number[]) : undefined;
      const state = stored !== undefined && typeof atUs === 'number' ? { debtUnits: stored, atUs } : undefined;
      const r = coreStep(state, d.nowUs, args);
      return { allowed: true, debtUnits: r.debtUnits, atUs: d.nowUs };
    }
    const callId = nextCallId();
    const update = stepPipeline(args, callId);
    const op = args.op;
    const findOptions = { upsert: true, returnDocument: 'after', projection: op ? opProjection(op.id) : stepProjection(limits), maxTimeMS: opTimeMS };
    let doc: unknown;
    try {
      doc = await collection.findOneAndUpdate(filter, update, findOptions);
    } catch (err) {
      // Two first decisions on one new bucket can race to insert it; the loser retries as an update.
      if ((err as { code?: unknown }).code !== 11000 || stepOptions.signal?.aborted) throw err;
      doc = await collection.findOneAndUpdate(filter, update, findOptions);
    }
    const withTokens = !args.adjust && args.tokenUnits !== undefined;
    if (op) {
      // The id's record: this call's (its step's result, as core step gives it) or an earlier call's.
      const rec = readOpRecord((doc as { op?: unknown } | null)?.op);
      if (rec) {
        if ((doc as { opCall?: unknown }).opCall !== callId) return repeatOf(rec, args);
        const { allowed, debtUnits, atUs } = rec;
        if (debtUnits.length === n) return withTokens ? { allowed, debtUnits, tokens: rec.tokens ?? 0, atUs } : { allowed, debtUnits, atUs };
      }
      throw new Error(`unexpected findOneAndUpdate result ${JSON.stringify(doc)?.slice(0, 120)}`);
    }
    const d = doc as ({ last?: { id?: unknown; debtUnits?: unknown; tokens?: unknown; atUs?: unknown }; nowUs?: unknown } & Record<string, unknown>) | null;
    const last = d?.last;
    if (last?.id === callId && Array.isArray(last.debtUnits) && last.debtUnits.length === n && last.debtUnits.every((u) => typeof u === 'number')) {
      const debtUnits = last.debtUnits as number[];
      const atUs = Number(last.atUs);
      return withTokens ? { allowed: true, debtUnits, tokens: Number(last.tokens), atUs } : { allowed: true, debtUnits, atUs };
    }
    const debtUnits = d ? readDebts(d, n) : undefined;
    if (debtUnits && typeof d!.nowUs === 'number') {
      const atUs = d!.nowUs;
      return withTokens ? { allowed: false, debtUnits, tokens: 0, atUs } : { allowed: false, debtUnits, atUs };
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
    ...(client && {
      /** Closes the MongoClient the store owns (closeClient), once: later calls wait for the same close. */
      close: (): Promise<void> =>
        (closed ??= client.close().then(
          () => undefined,
          (err: unknown) => {
            throw new StoreError('mongodb', `close failed: ${message(err)}`, { cause: err });
          },
        )),
    }),
  };
}
