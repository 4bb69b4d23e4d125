// The embedded default store: buckets in this process (a Map from key to a slot of one Float64Array). It
// is its own store, so the process's monotonic clock is the store clock, read in whole µs like every
// store's. Bounded by maxKeys.
import { CALLER_LAG_US, ceilDiv, chargedUnitsOf, decayed, repeatOf, settledArgs, step, takeUnits, type BucketState, type LimitStep, type OpRecord } from '../core/gcra.js';
import { flattened, ownCopy, ROPE_MIN_LENGTH } from '../core/key.js';
import { applyOverride, numbersAt, stepWithRecord, type OverrideWrites } from '../core/override.js';
import { ConfigError, StoreError } from '../errors.js';
import type { OverrideArgs, OverrideResult, StepArgs, StepResult, Store } from '../store.js';
import { memoryRecords } from './memory-records.js';

/** Options of memoryStore. */
export interface MemoryStoreOptions {
  /**
   * Most buckets kept. When a new bucket would exceed it, full buckets (which hold no information)
   * are dropped first, then one not used since the eviction hand last passed it (second chance, an
   * approximation of least recently used). Dropping a non-full bucket refills it, so size this above
   * the number of keys active within one refill window. A bucket taken more than once holds about 170
   * bytes with a key of up to 12 characters, about 250 at 40 (17-25 MB at the default).
   * @default 100_000
   */
  maxKeys?: number;
  /**
   * Most operation ids (StepArgs.op, an Idempotency-Key) remembered at once. An id is kept for its
   * ttlMs; when more than this many are younger, the oldest is forgotten early (a retry of it would
   * apply again). @default 100_000
   */
  maxOps?: number;
  /**
   * Most override records (Store.override: a key's limits changed at runtime, or a block) kept at once.
   * A live record is never dropped to make room, nor with its bucket: setting one more is a StoreError
   * naming this option (records that have ended, with nothing left to carry, are dropped first).
   * (Records a step installs for a policy-wide change are not counted: they go with their bucket, and
   * the next step installs them again.) @default 100_000
   */
  maxOverrides?: number;
  /**
   * The clock, in ms; read to the µs (its readings are floored to whole µs, the resolution of every
   * store's clock). Tests pass a fake one. @default performance.timeOrigin + performance.now()
   */
  nowMs?: () => number;
}

/** The memory store: a Store that also steps synchronously (the limiter's fast path) and reports its size. */
export interface MemoryStore extends Store {
  stepSync(key: string, args: StepArgs): StepResult;
  takeOneSync(prefix: string, key: string, limit: LimitStep): number;
  override(key: string, args: OverrideArgs): Promise<OverrideResult>;
  /** Store.override, synchronously. */
  overrideSync(key: string, args: OverrideArgs): OverrideResult;
  /** Buckets held now. */
  readonly size: number;
  /** Non-full buckets dropped to stay under maxKeys since creation (each one is a bucket refilled early). */
  readonly evictedActive: number;
}

const SWEEP_BATCH = 64;
/**
 * The buckets that takeOneSync reached under one key prefix, by the rest of their storage key: an index
 * beside `slots`, so that a take in the limiter's hot path finds its bucket by the caller's key, with no
 * storage key built (a new string of prefix and key, hashed from scratch, on every decision).
 */
interface KeySpace {
  readonly prefix: string;
  readonly slots: Map<string, number>;
}

// A bucket lives in a slot: `slots` maps its storage key to the slot's offset in one Float64Array, where
// the slot's four numbers sit side by side, unboxed. At 100,000 keys a decision then reads the Map's
// entry, the key and one cache line; a bucket as an object also read a boxed double for each of its
// times, and its debt array and that array's elements, each a cache miss of its own.
/** The store clock's reading, in whole µs, at which the bucket had its debts. */
const AT = 0;
/** A bucket of one limit: its debt in units (a bucket of several keeps its debts in `several`). */
const DEBT = 1;
/**
 * A bucket of one limit: its refill in units per µs, so that eviction can tell when it is full again
 * (AT + ceil(DEBT / RATE)) without a division on every write.
 */
const RATE = 2;
/**
 * The number of limits times 2, plus 1 when the bucket was used since the eviction hand last passed it
 * (second chance). A small integer, exact in a double.
 */
const META = 3;
const STRIDE = 4;

/** A store in this process's memory, timed by performance.now(): for one process (development, single servers), bounded by maxKeys. */
export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  const maxKeys = options.maxKeys ?? 100_000;
  if (!Number.isInteger(maxKeys) || maxKeys < 1) throw new ConfigError('maxKeys', `must be a positive integer, got ${String(maxKeys)}`);
  // `performance` is read once: on Node the global is a getter, which costs ~30 ns on every read.
  const perf = performance;
  const originUs = Math.round(perf.timeOrigin * 1000);
  const custom = options.nowMs;
  // A fake ms clock read to the nearest µs: a reading of t / 1000 ms, times 1000, may land a hair below t.
  const nowUs = custom ? () => Math.round(custom() * 1000) : () => originUs + Math.floor(perf.now() * 1000);
  // Recency is approximate (CLOCK / second chance): an access only sets the used bit, so a hot bucket
  // costs one lookup, not a delete and re-insert. Eviction walks from the oldest insertion: full buckets
  // go, used ones get a second chance (bit cleared, moved to the back), and the first unused one goes.
  const slots = new Map<string, number>();
  // Grows by doubling up to maxKeys slots (never more buckets than that); a dropped bucket's slot is
  // reused, and the array never shrinks (32 bytes a slot: 3.2 MB at the default maxKeys). A bucket's Map
  // entry and key hold ~80 bytes more of JS heap with a key of up to 12 characters (~120 at 40), and its
  // entry in takeOneSync's index as much again (measured at 100,000 keys).
  let nums = new Float64Array(STRIDE * Math.min(maxKeys, 64));
  let nextSlot = 0;
  const freeSlots: number[] = [];
  /** Buckets of several limits, by slot: their debts, and their limits' refill rates (for eviction). */
  const several = new Map<number, { debtUnits: readonly number[]; limits: readonly { refillUnitsPerUs: number }[] }>();
  // What `step` reads of a stored bucket: one object and array, refilled before each step. Safe because
  // `step` only reads its state, and neither returns nor keeps it (its results are new arrays).
  const oneDebt = [0];
  const view: BucketState = { debtUnits: oneDebt, atUs: 0, reservedUntilUs: undefined };
  /** Reservation horizons (BucketState.reservedUntilUs), by slot: only buckets with one pending. */
  const reserved = new Map<number, number>();
  let evictedActive = 0;
  // Operation ids by key and id (see stepSync), oldest first (they are only ever added at the end).
  const maxOps = options.maxOps ?? 100_000;
  if (!Number.isInteger(maxOps) || maxOps < 1) throw new ConfigError('maxOps', `must be a positive integer, got ${String(maxOps)}`);
  const ops = new Map<string, { record: OpRecord; expiresAtUs: number }>();
  // takeOneSync's index (see KeySpace): key spaces by prefix. A slot is indexed in at most one space,
  // kept beside it in spaceOf (by slot number, `at / STRIDE`), under the rest of its storage key after
  // the space's prefix, so that dropping the slot takes its index entry with it. `slots` stays the
  // record of which buckets exist; the index only points into it, and a storage key reached by two
  // splits (prefix 'a:', key 'b' and prefix 'a:b', key '') is one bucket, found by the second split
  // through `slots`.
  const spaces = new Map<string, KeySpace>();
  const spaceOf: (KeySpace | undefined)[] = [];
  // Override records (./memory-records.ts): `records` is their Map, read directly by the steps.
  // An ended record's room, at maxOverrides: its bucket full (or none) at `untilUs`, then dropped with it.
  const bucketFull = (k: string, untilUs: number) => {
    const at = slots.get(k);
    return at === undefined || (isFull(at, untilUs) && (drop(k, at), true));
  };
  const overrides = memoryRecords(options.maxOverrides ?? 100_000, { nowUs, bucketFull });
  const records = overrides.map;

  /** Forgets expired ids from the oldest end, and the oldest ones beyond maxOps. */
  function pruneOps(now: number): void {
    for (const [k, o] of ops) {
      if (o.expiresAtUs > now && ops.size < maxOps) break;
      ops.delete(k);
    }
  }

  function newSlot(): number {
    const reused = freeSlots.pop();
    if (reused !== undefined) return reused;
    const at = nextSlot;
    nextSlot += STRIDE;
    spaceOf.push(undefined);
    if (nextSlot > nums.length) {
      const grown = new Float64Array(Math.min(nums.length * 2, STRIDE * maxKeys));
      grown.set(nums);
      nums = grown;
    }
    return at;
  }

  function drop(key: string, at: number): void {
    slots.delete(key);
    if (reserved.size !== 0) reserved.delete(at);
    if (records.size !== 0 && overrides.goesWithBucket(key)) overrides.set(key, null, true);
    if (nums[at + META]! >= 4) several.delete(at);
    const i = at / STRIDE;
    const space = spaceOf[i];
    if (space !== undefined) {
      space.slots.delete(key.slice(space.prefix.length));
      if (space.slots.size === 0) spaces.delete(space.prefix);
      spaceOf[i] = undefined;
    }
    freeSlots.push(at);
  }

  /** Whether the bucket in slot `at` is full at `now`: past the whole µs at which every limit is, and its reservation's caller come (CALLER_LAG_US). */
  function isFull(at: number, now: number): boolean {
    const atUs = nums[at + AT]!;
    if (reserved.size !== 0 && (reserved.get(at) ?? 0) > now - CALLER_LAG_US) return false;
    if (nums[at + META]! < 4) return atUs + ceilDiv(nums[at + DEBT]!, nums[at + RATE]!) <= now;
    const { debtUnits, limits } = several.get(at)!;
    for (let i = 0; i < debtUnits.length; i++) if (atUs + ceilDiv(debtUnits[i]!, limits[i]!.refillUnitsPerUs) > now) return false;
    return true;
  }

  function makeRoom(now: number): void {
    let seen = 0;
    let dropped = 0;
    for (const [k, at] of slots) {
      // A bucket beside a record is never taken for full here: its numbers may end before it refills.
      if ((records.size === 0 || !records.has(k)) && isFull(at, now)) {
        drop(k, at);
        dropped++;
      }
      if (++seen >= SWEEP_BATCH) break;
    }
    if (dropped > 0) return;
    // Every bucket gets at most one second chance, so this ends within size + 1 steps.
    for (const [k, at] of slots) {
      const meta = nums[at + META]!;
      if ((meta & 1) === 0) {
        drop(k, at);
        evictedActive++;
        return;
      }
      nums[at + META] = meta - 1;
      slots.delete(k);
      slots.set(k, at);
    }
  }

  /** Indexes slot `at` (which has no index entry) under prefix and key, for takeOneSync. */
  function index(prefix: string, key: string, at: number): void {
    let space = spaces.get(prefix);
    if (space === undefined) {
      space = { prefix: ownCopy(prefix), slots: new Map() };
      spaces.set(space.prefix, space);
    }
    space.slots.set(ownCopy(key), at);
    spaceOf[at / STRIDE] = space;
  }

  /** Where a bucket written at `now` goes: its slot `at`, or a new one (made room for) when it has none. */
  function slotFor(key: string, at: number | undefined, now: number): number {
    if (at !== undefined) return at;
    if (slots.size >= maxKeys) makeRoom(now);
    const to = newSlot();
    slots.set(key, to);
    return to;
  }

  /** Writes a bucket of one limit into slot `to`; `used` is 1 for a bucket that was there (see META). */
  function writeOne(to: number, now: number, debtUnits: number, refillUnitsPerUs: number, used: number): void {
    if (nums[to + META]! >= 4) several.delete(to);
    nums[to + AT] = now;
    nums[to + DEBT] = debtUnits;
    nums[to + RATE] = refillUnitsPerUs;
    nums[to + META] = 2 + used;
  }

  const store: MemoryStore = {
    name: 'memory',
    inProcess: true,
    get size() {
      return slots.size;
    },
    get evictedActive() {
      return evictedActive;
    },
    stepSync(key: string, args: StepArgs): StepResult {
      const now = nowUs();
      key = flattened(key);
      const { op } = args;
      // The key's length first, so that no two (key, id) share an entry whatever characters they hold.
      const opKey = op === undefined ? '' : `${key.length}:${key}${op.id}`;
      if (op !== undefined) {
        const seen = ops.get(opKey);
        if (seen !== undefined && seen.expiresAtUs > now) return repeatOf(seen.record, args);
      }
      // A settlement: its charge's record, live and a take's, gives the units to settle against.
      let charged: number[] | undefined;
      if (args.settle !== undefined) {
        const charge = ops.get(`${key.length}:${key}${args.settle.chargeId}`);
        charged = charge !== undefined && charge.expiresAtUs > now ? charge.record.chargedUnits : undefined;
        if (charged === undefined) return { allowed: false, debtUnits: [], atUs: now, unknownCharge: true };
      }
      const at = slots.get(key);
      let state: BucketState | undefined;
      if (at !== undefined) {
        if (nums[at + META]! < 4) {
          oneDebt[0] = nums[at + DEBT]!;
          view.debtUnits = oneDebt;
        } else view.debtUnits = several.get(at)!.debtUnits;
        view.atUs = nums[at + AT]!;
        view.reservedUntilUs = reserved.size === 0 ? undefined : reserved.get(at);
        state = view;
      }
      const stepped = charged === undefined ? args : settledArgs(args, charged);
      const record = records.size === 0 ? undefined : records.get(key);
      let r: StepResult & OverrideWrites;
      if (record === undefined && args.policy === undefined && !(state !== undefined && args.policySeenUs! > state.atUs)) r = step(state, now, stepped);
      else {
        // A view of the policy-wide change that is no version refuses the step, as every store's does.
        const seen = args.policySeenUs;
        if (seen !== undefined && !(Number.isSafeInteger(seen) && seen >= 0)) throw new StoreError('memory', `StepArgs.policySeenUs must be whole µs of 0 or more, got ${String(seen)}`);
        r = stepWithRecord(state, now, stepped, record);
      }
      const { write } = r;
      // The refill in force, kept for eviction: the record's when the step ran under its numbers.
      const limits = r.limits ?? args.limits;
      if (write) {
        const { debtUnits } = write;
        const n = debtUnits.length;
        const to = slotFor(key, at, now);
        const used = at === undefined ? 0 : 1;
        if (n === 1) writeOne(to, now, debtUnits[0]!, limits[0]!.refillUnitsPerUs, used);
        else {
          several.set(to, { debtUnits, limits });
          nums[to + AT] = now;
          nums[to + META] = n * 2 + used;
        }
        if (write.reservedUntilUs !== undefined) reserved.set(to, write.reservedUntilUs);
        else if (reserved.size !== 0) reserved.delete(to);
      } else if (write === null) {
        // Full again (or refunded to full): no state is a full bucket.
        drop(key, at!);
      }
      if (r.writeRecord !== undefined) {
        overrides.set(key, r.writeRecord, true);
        if (!slots.has(key) && overrides.goesWithBucket(key)) overrides.set(key, null, true);
        delete r.writeRecord;
      }
      if (op !== undefined) {
        pruneOps(now);
        const record: OpRecord = { allowed: r.allowed, debtUnits: r.debtUnits, atUs: now, fingerprint: op.fingerprint };
        if (r.tokens !== undefined) record.tokens = r.tokens;
        if (r.limits !== undefined) record.limits = r.limits;
        if (r.blockedUntilUs !== undefined) record.blockedUntilUs = r.blockedUntilUs;
        if (charged !== undefined) record.chargedUnits = charged;
        else if (!args.adjust) record.chargedUnits = chargedUnitsOf(args, r);
        ops.delete(opKey);
        ops.set(opKey, { record, expiresAtUs: now + op.ttlMs * 1000 });
      }
      return r;
    },
    takeOneSync(this: Store | undefined, prefix: string, key: string, limit: LimitStep, seenUs?: number): number {
      // A cost of 0 or less is no take: the general step answers it (a peek writes nothing). So does a
      // copy of this store whose stepSync was replaced ({ ...memoryStore(), stepSync }): its stepSync
      // is what it answers by.
      const self = this ?? store;
      if (!(limit.costUnits > 0) || self.stepSync !== store.stepSync) {
        const r = self.stepSync!(prefix + key, { limits: [limit] });
        return r.allowed ? r.debtUnits[0]! : -1 - r.debtUnits[0]!;
      }
      // A key with a record is stepped by stepSync, with the step's base numbers (see Store.takeOneSync).
      if (records.size !== 0 && records.has(flattened(prefix + key))) return Number.NaN;
      const now = nowUs();
      if (key.length >= ROPE_MIN_LENGTH) key = flattened(key);
      let at = spaces.get(prefix)?.slots.get(key);
      let storageKey = '';
      // Found by the index; else found by its storage key (and indexed below), or new.
      const indexed = at !== undefined;
      if (!indexed) {
        storageKey = flattened(prefix + key);
        at = slots.get(storageKey);
      }
      // A bucket written before the version the caller read: stepSync counts its refill from then.
      if (at !== undefined && seenUs !== undefined && nums[at + AT]! < seenUs) return Number.NaN;
      // A bucket stored with several limits (the policy had more) is read by its first, as step reads it.
      const d = at === undefined ? 0 : decayed(nums[at + META]! < 4 ? nums[at + DEBT]! : several.get(at)!.debtUnits[0]!, nums[at + AT]!, now, limit.refillUnitsPerUs);
      const after = takeUnits(d, limit);
      // Allowed, the debt is at least the cost: above 0, so the bucket is kept.
      if (after >= 0) writeOne(slotFor(storageKey, at, now), now, after, limit.refillUnitsPerUs, at === undefined ? 0 : 1);
      // A bucket is indexed the second time a take reaches it (the first made it): a key seen once, as
      // in a flood of new keys, costs the index nothing but a miss. One already indexed under another
      // split of its storage key stays as it is.
      if (!indexed && at !== undefined && spaceOf[at / STRIDE] === undefined) index(prefix, key, at);
      return after;
    },
    async step(key: string, args: StepArgs): Promise<StepResult> {
      return store.stepSync(key, args);
    },
    async reset(key: string): Promise<void> {
      key = flattened(key);
      const at = slots.get(key);
      if (at !== undefined) drop(key, at);
    },
    async override(key: string, args: OverrideArgs): Promise<OverrideResult> {
      return store.overrideSync(key, args);
    },
    overrideSync(key: string, args: OverrideArgs): OverrideResult {
      const now = nowUs();
      key = flattened(key);
      const at = slots.get(key);
      const r0 = at === undefined || reserved.size === 0 ? undefined : reserved.get(at);
      const state: BucketState | undefined = at === undefined ? undefined : { debtUnits: nums[at + META]! < 4 ? [nums[at + DEBT]!] : several.get(at)!.debtUnits, atUs: nums[at + AT]!, ...(r0 === undefined ? {} : { reservedUntilUs: r0 }) };
      const r = applyOverride(state, records.get(key), now, args);
      // The record first: it is the write that may be refused (maxOverrides), and then nothing changes.
      if (r.writeRecord !== undefined) overrides.set(key, r.writeRecord, false, args.policyId !== undefined && args.limits !== undefined);
      if (r.write) {
        const { debtUnits } = r.write;
        const limits = numbersAt(r.after, now, args.base);
        const to = slotFor(key, at, now);
        if (debtUnits.length === 1) writeOne(to, now, debtUnits[0]!, limits[0]!.refillUnitsPerUs, 1);
        else {
          several.set(to, { debtUnits, limits });
          nums[to + AT] = now;
          nums[to + META] = debtUnits.length * 2 + 1;
        }
        if (r.write.reservedUntilUs !== undefined) reserved.set(to, r.write.reservedUntilUs);
        else if (reserved.size !== 0) reserved.delete(to);
      } else if (r.write === null) drop(key, at!);
      // A copy of a policy-wide change left with no bucket (an unblock of a full key) goes, as after a step.
      if (r.writeRecord !== undefined && !slots.has(key) && overrides.goesWithBucket(key)) overrides.set(key, null, true);
      const { write: _w, writeRecord: _r, ...result } = r;
      return result;
    },
    async ping(): Promise<void> {},
  };
  return store;
}
