// MongoDB store: one findOneAndUpdate with an update pipeline per decision, timed by $$NOW.
// Buckets live in one collection, one document each: { _id: key, debt: [debt per limit], atUs, expiresAt, last }
// (no debt and atUs when every limit is full), plus { reservedUntilUs } while a reservation is pending,
// { ops, opsUntil, opCall } once an operation id was applied,
// and { ov } while the key has an override record (its numbers, their end, a block; mongodb-override.ts).
// A denied step leaves the document byte-identical, so MongoDB writes nothing (no oplog entry) for it; so
// does a repeated operation id, and a denied step with a new id writes only that id's record.
// The driver is never imported here: pass a driver Collection (the `mongodb` package), so that bundles
// that do not use this store never contain the driver.
import { ConfigError, StoreError } from '../errors.js';
import type { OverrideArgs, OverrideLimit, OverrideRecord, OverrideResult, StepArgs, StepOptions, StepResult, Store } from '../store.js';
import { repeatOf, type BucketState } from '../core/gcra.js';
import { applyOverride, liveRecord, stepWithRecord } from '../core/override.js';
import { limitsOf, opProjection, peekPipeline, recordProjection, stepPipeline, stepProjection } from './mongodb-pipeline.js';
import { overridePipeline, recordPlan, resetPipeline } from './mongodb-override.js';
import { checkOverrideArgs, checkPolicyView, readBucket, readDebts, readOpRecord, resultOf, resultOfOverride, withBase, type OpRecordDocument } from './mongodb-read.js';

export { MAX_OPS_PER_BUCKET, opProjection, peekPipeline, recordProjection, stepPipeline, stepProjection } from './mongodb-pipeline.js';
export { overridePipeline, recordPlan, type RecordPlan, type LimitParams } from './mongodb-override.js';
export type { OpRecordDocument };

/** Most keys a store remembers as holding an override record (a hint: see mongoStore's step). */
const MAX_RECORD_HINTS = 10_000;

/**
 * A bucket document. `debt` holds each limit's debt in its units, in the policy's order, at `atUs`, the
 * server clock's reading in whole µs (all integers below 2^53, stored as numbers: exact); both are
 * absent when a step left every limit full (a full bucket, as if there were no document). `expiresAt`
 * feeds the TTL index (every limit is full again by then); `last` is the most recent allowed step: its
 * call id (so that call knows it was applied), the debts after it and the clock reading.
 * `ov` is the key's override record (Store.override): while it has live numbers the debts are in them
 * (core/override.ts), and the document expires no sooner than the record ends, never while its numbers
 * have no end.
 * A document written before policies had several limits holds `debt` as one number: it reads as the
 * debt of the first limit (the others full), and the next allowed step rewrites it as an array.
 */
export interface BucketDocument {
  _id: string;
  debt?: number[] | number;
  atUs?: number;
  /**
   * While a reservation is pending (a take with maxWaitMs admitted with a wait): the server clock's
   * reading, in whole µs, when the last one granted is due (core BucketState.reservedUntilUs). A change
   * of the key's numbers before then carries the bucket as it will stand then, so the reservations keep
   * their times. Absent otherwise, and with the bucket.
   */
  reservedUntilUs?: number;
  expiresAt?: Date;
  /**
   * `tokens`: the tokens a lease grant took (partial grants only); `limits`: the numbers in force when
   * they were the record's. Written by Store.override instead: its call id, clock reading and the
   * record before (`before`).
   */
  last?: { id: string; debtUnits?: number[]; atUs: number; tokens?: number; limits?: OverrideLimit[]; before?: OverrideRecord };
  /** The key's override record. */
  ov?: OverrideRecord;
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

/** The part of the driver's Collection that the store uses. */
export interface MongoCollectionLike {
  findOneAndUpdate(filter: { _id: string }, update: object[], options: object): Promise<unknown>;
  /** The driver's aggregate accepts `signal` (Abortable) and `maxTimeMS`. */
  aggregate(pipeline: object[], options?: object): { toArray(): Promise<unknown[]> };
  /** `ov` and `ops` only ever `{ $exists: false }`: reset deletes a document that holds no override record and no operation id's record. */
  deleteOne(filter: { _id: string; ov?: { $exists: false }; ops?: { $exists: false } }): Promise<unknown>;
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

  // Keys this store last saw holding an override record: their steps go with the record plan at once.
  // A hint only: the plain pipeline leaves a document with a record unchanged and says so, and the plan
  // is right on any document, so a stale or lost hint costs one round trip or a larger update, never a
  // wrong answer. Bounded: the oldest hint goes first.
  const recordKeys = new Set<string>();
  const hint = (key: string, has: boolean) => {
    if (!has) recordKeys.delete(key);
    else if (!recordKeys.has(key)) {
      if (recordKeys.size >= MAX_RECORD_HINTS) recordKeys.delete(recordKeys.values().next().value!);
      recordKeys.add(key);
    }
  };

  const timeOf = (stepOptions: StepOptions) => (stepOptions.timeoutMs === undefined ? maxTimeMS : Math.max(1, Math.min(maxTimeMS, Math.ceil(stepOptions.timeoutMs))));

  async function update(filter: { _id: string }, pipeline: object[], projection: object, stepOptions: StepOptions, upsert = true): Promise<Record<string, unknown> | null> {
    const findOptions = { upsert, returnDocument: 'after', projection, maxTimeMS: timeOf(stepOptions) };
    try {
      return (await collection.findOneAndUpdate(filter, pipeline, findOptions)) as Record<string, unknown> | null;
    } catch (err) {
      // Two first decisions on one new bucket can race to insert it; the loser retries as an update.
      if ((err as { code?: unknown }).code !== 11000 || stepOptions.signal?.aborted) throw err;
      return (await collection.findOneAndUpdate(filter, pipeline, findOptions)) as Record<string, unknown> | null;
    }
  }

  async function read(filter: { _id: string }, stepOptions: StepOptions): Promise<{ state?: BucketState; record?: OverrideRecord; nowUs: number }> {
    const aggOptions = stepOptions.signal ? { maxTimeMS: timeOf(stepOptions), signal: stepOptions.signal } : { maxTimeMS: timeOf(stepOptions) };
    const docs = await collection.aggregate(peekPipeline(filter._id), aggOptions).toArray();
    const d = docs[0] as { b?: Record<string, unknown>; nowUs?: unknown } | undefined;
    if (typeof d?.nowUs !== 'number') throw new Error(`unexpected aggregate result ${JSON.stringify(docs)?.slice(0, 120)}`);
    return { ...readBucket(d.b), nowUs: d.nowUs };
  }

  async function step(key: string, args: StepArgs, stepOptions: StepOptions = {}): Promise<StepResult> {
    const filter = idFilter(key);
    const limits = limitsOf(args);
    checkPolicyView(args);
    const n = limits.length;
    const withTokens = !args.adjust && args.tokenUnits !== undefined;
    // A settlement's costs are actual costs: one of 0 is no peek.
    const { settle } = args;
    if (!settle && limits.every((l) => l.costUnits === 0)) {
      // A peek (core/gcra.ts step: every cost 0): read only, never an upsert. The stored debts and their
      // reading, decayed to the one reading of $$NOW here by core's own arithmetic (the same integers the
      // pipeline uses), so the debts and atUs reported always agree.
      const { state, record, nowUs } = await read(filter, stepOptions);
      hint(key, record !== undefined);
      const r = stepWithRecord(state, nowUs, withBase(args, record, nowUs, state), record);
      // Only where a record is installed, replaced, cleared or has ended does a peek write (core writes
      // then): the same step, with the plan, in one update.
      if (r.writeRecord === undefined) return resultOf(r);
    }
    // With the plan at once: a policy-wide change to install, a key known to hold a record, a peek that
    // writes. Never without StepArgs.base (the plain update tells whether the key holds a record).
    let plan = args.base !== undefined && (args.policy !== undefined || recordKeys.has(key) || (!settle && limits.every((l) => l.costUnits === 0)));
    for (;;) {
      const callId = nextCallId();
      const op = args.op;
      let doc: Record<string, unknown> | null;
      if (plan) {
        // A settlement never makes a document: with none, there is no charge to settle.
        doc = await update(filter, stepPipeline(args, callId, recordPlan(args)), recordProjection(op?.id), stepOptions, !settle);
      } else {
        doc = await update(filter, stepPipeline(args, callId), op ? opProjection(op.id) : stepProjection(limits, args.policySeenUs), stepOptions, !settle);
        if (doc?.ov !== undefined && doc.ov !== null) {
          // The document holds a record, which the plain update left as it was: again, with the plan.
          if (args.base === undefined) args = withBase(args, readBucket(doc).record, Number(doc.nowUs), undefined);
          hint(key, true);
          plan = true;
          continue;
        }
      }
      if (plan) hint(key, doc?.ov !== undefined && doc.ov !== null);
      if (op) {
        // The id's record: this call's (its step's result, as core step gives it) or an earlier call's.
        // A settlement with no document, or marked unknown (see stepPipeline's opCall): no such charge.
        if (settle && (doc === null || doc.opCall === `!${callId}`)) return { allowed: false, debtUnits: [], unknownCharge: true };
        const rec = readOpRecord(doc?.op);
        if (rec && doc!.opCall === callId && rec.debtUnits.length === n) {
          const { allowed, debtUnits, atUs, blockedUntilUs } = rec;
          const r: StepResult = withTokens && blockedUntilUs === undefined ? { allowed, debtUnits, tokens: rec.tokens ?? 0, atUs } : { allowed, debtUnits, atUs };
          if (rec.limits) r.limits = rec.limits;
          if (blockedUntilUs !== undefined) r.blockedUntilUs = blockedUntilUs;
          return r;
        }
        if (rec) return repeatOf(rec, args);
        throw new Error(`unexpected findOneAndUpdate result ${JSON.stringify(doc)?.slice(0, 120)}`);
      }
      const last = doc?.last as { id?: unknown; debtUnits?: unknown; tokens?: unknown; atUs?: unknown; limits?: unknown; blockedUntilUs?: unknown } | undefined;
      if (last?.id === callId && Array.isArray(last.debtUnits) && last.debtUnits.length === n && last.debtUnits.every((u) => typeof u === 'number')) {
        const debtUnits = last.debtUnits as number[];
        const atUs = Number(last.atUs);
        const r: StepResult = withTokens ? { allowed: true, debtUnits, tokens: Number(last.tokens), atUs } : { allowed: true, debtUnits, atUs };
        if (Array.isArray(last.limits)) r.limits = last.limits as OverrideLimit[];
        // An adjustment applied on a blocked key says so.
        if (typeof last.blockedUntilUs === 'number') r.blockedUntilUs = last.blockedUntilUs;
        return r;
      }
      if (plan && doc && typeof doc.nowUs === 'number') {
        // Refused, by the bucket or a block: the document is as the update read it (or carried to now), so
        // core answers from it at the projection's reading of the clock.
        const { state, record } = readBucket(doc);
        const r = stepWithRecord(state, doc.nowUs, { ...withBase(args, record, doc.nowUs, state), limits: limits.map((l) => ({ ...l, costUnits: 0 })), adjust: false }, record);
        const refused: StepResult = { allowed: false, debtUnits: r.debtUnits, atUs: doc.nowUs };
        if (r.blockedUntilUs !== undefined) refused.blockedUntilUs = r.blockedUntilUs;
        else if (withTokens) refused.tokens = 0;
        if (r.limits) refused.limits = r.limits;
        return refused;
      }
      const debtUnits = doc ? readDebts(doc, n) : undefined;
      if (debtUnits && typeof doc!.nowUs === 'number') {
        const atUs = doc!.nowUs;
        return withTokens ? { allowed: false, debtUnits, tokens: 0, atUs } : { allowed: false, debtUnits, atUs };
      }
      throw new Error(`unexpected findOneAndUpdate result ${JSON.stringify(doc)?.slice(0, 120)}`);
    }
  }

  async function override(key: string, args: OverrideArgs, stepOptions: StepOptions = {}): Promise<OverrideResult> {
    const filter = idFilter(key);
    checkOverrideArgs(args);
    if (args.limits === undefined && args.blockForMs === undefined) {
      // Nothing to change: a read (what has ended is left for the next write to drop).
      const { state, record, nowUs } = await read(filter, stepOptions);
      hint(key, record !== undefined);
      return resultOfOverride(applyOverride(state, record, nowUs, args));
    }
    const callId = nextCallId();
    const doc = await update(filter, overridePipeline(args, callId), recordProjection(), stepOptions);
    const { state, record } = readBucket(doc ?? undefined);
    hint(key, record !== undefined);
    const last = doc?.last as { id?: unknown; atUs?: unknown; before?: unknown } | undefined;
    if (last?.id === callId && typeof last.atUs === 'number') {
      const out: OverrideResult = { atUs: last.atUs };
      const before = liveRecord(last.before as OverrideRecord | undefined, last.atUs);
      if (before !== undefined) out.before = before;
      if (record !== undefined) out.after = record;
      return out;
    }
    // The record was already as asked: nothing written, and core says what it is at the projection's reading.
    if (typeof doc?.nowUs !== 'number') throw new Error(`unexpected findOneAndUpdate result ${JSON.stringify(doc)?.slice(0, 120)}`);
    return resultOfOverride(applyOverride(state, record, doc.nowUs, args));
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
        // A document with no record and no operation id's record goes; another forgets the bucket and
        // keeps the record and the operation ids (a retry is still a repeat, a charge can still be
        // settled, as on every store), its expiry then theirs (review 9, F2).
        const r = (await collection.deleteOne({ ...filter, ov: { $exists: false }, ops: { $exists: false } })) as { deletedCount?: unknown } | null;
        if (r?.deletedCount !== 1) await collection.findOneAndUpdate(filter, resetPipeline(), { upsert: false, projection: { _id: 1 }, maxTimeMS });
      } catch (err) {
        throw new StoreError('mongodb', `reset failed: ${message(err)}`, { cause: err });
      }
    },
    async override(key, args, stepOptions) {
      try {
        return await override(key, args, stepOptions);
      } catch (err) {
        if (err instanceof StoreError) throw err;
        throw new StoreError('mongodb', message(err), { cause: err });
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
