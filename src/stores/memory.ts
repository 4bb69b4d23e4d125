// The embedded default store: buckets in a Map in this process. It is its own store, so the process's
// monotonic clock is the store clock, read in whole µs like every store's. Bounded by maxKeys.
import { ceilDiv, repeatOf, step, type OpRecord } from '../core/gcra.js';
import { ConfigError } from '../errors.js';
import type { StepArgs, StepResult, Store } from '../store.js';

export interface MemoryStoreOptions {
  /**
   * Most buckets kept. When a new bucket would exceed it, full buckets (which hold no information)
   * are dropped first, then one not used since the eviction hand last passed it (second chance, an
   * approximation of least recently used). Dropping a non-full bucket refills it, so size this above
   * the number of keys active within one refill window.
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
   * The clock, in ms; read to the µs (its readings are floored to whole µs, the resolution of every
   * store's clock). Tests pass a fake one. @default performance.timeOrigin + performance.now()
   */
  nowMs?: () => number;
}

export interface MemoryStore extends Store {
  stepSync(key: string, args: StepArgs): StepResult;
  /** Buckets held now. */
  readonly size: number;
  /** Non-full buckets dropped to stay under maxKeys since creation (each one is a bucket refilled early). */
  readonly evictedActive: number;
}

const SWEEP_BATCH = 64;

/**
 * A bucket: its state (each limit's debt in units at atUs), when every limit is full again (µs), and
 * whether it was used since the eviction hand last passed it (second chance).
 */
interface Bucket {
  debtUnits: readonly number[];
  atUs: number;
  fullAtUs: number;
  used: boolean;
}

export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  const maxKeys = options.maxKeys ?? 100_000;
  if (!Number.isInteger(maxKeys) || maxKeys < 1) throw new ConfigError('maxKeys', `must be a positive integer, got ${String(maxKeys)}`);
  // `performance` is read once: on Node the global is a getter, which costs ~30 ns on every read.
  const perf = performance;
  const originUs = Math.round(perf.timeOrigin * 1000);
  const custom = options.nowMs;
  // A fake ms clock read to the nearest µs: a reading of t / 1000 ms, times 1000, may land a hair below t.
  const nowUs = custom ? () => Math.round(custom() * 1000) : () => originUs + Math.floor(perf.now() * 1000);
  // Recency is approximate (CLOCK / second chance): an access only sets `used`, so a hot bucket costs
  // one lookup, not a delete and re-insert. Eviction walks from the oldest insertion: full buckets go,
  // used ones get a second chance (flag cleared, moved to the back), and the first unused one goes.
  const buckets = new Map<string, Bucket>();
  let evictedActive = 0;
  // Operation ids by key and id (see stepSync), oldest first (they are only ever added at the end).
  const maxOps = options.maxOps ?? 100_000;
  if (!Number.isInteger(maxOps) || maxOps < 1) throw new ConfigError('maxOps', `must be a positive integer, got ${String(maxOps)}`);
  const ops = new Map<string, { record: OpRecord; expiresAtUs: number }>();

  /** Forgets expired ids from the oldest end, and the oldest ones beyond maxOps. */
  function pruneOps(now: number): void {
    for (const [k, o] of ops) {
      if (o.expiresAtUs > now && ops.size < maxOps) break;
      ops.delete(k);
    }
  }

  function makeRoom(now: number): void {
    let seen = 0;
    let dropped = 0;
    for (const [k, b] of buckets) {
      if (b.fullAtUs <= now) {
        buckets.delete(k);
        dropped++;
      }
      if (++seen >= SWEEP_BATCH) break;
    }
    if (dropped > 0) return;
    // Every bucket gets at most one second chance, so this ends within size + 1 steps.
    for (const [k, b] of buckets) {
      buckets.delete(k);
      if (!b.used) {
        evictedActive++;
        return;
      }
      b.used = false;
      buckets.set(k, b);
    }
  }

  const store: MemoryStore = {
    name: 'memory',
    inProcess: true,
    get size() {
      return buckets.size;
    },
    get evictedActive() {
      return evictedActive;
    },
    stepSync(key: string, args: StepArgs): StepResult {
      const now = nowUs();
      const { op } = args;
      // The key's length first, so that no two (key, id) share an entry whatever characters they hold.
      const opKey = op === undefined ? '' : `${key.length}:${key}${op.id}`;
      if (op !== undefined) {
        const seen = ops.get(opKey);
        if (seen !== undefined && seen.expiresAtUs > now) return repeatOf(seen.record, args);
      }
      const bucket = buckets.get(key);
      const r = step(bucket, now, args);
      const { write } = r;
      if (write) {
        // Whole µs until every limit is full: a bucket past it is full, whatever its stored debts say.
        let fullAtUs = now;
        for (let i = 0; i < write.debtUnits.length; i++) {
          fullAtUs = Math.max(fullAtUs, now + ceilDiv(write.debtUnits[i]!, args.limits[i]!.refillUnitsPerUs));
        }
        if (bucket) {
          bucket.debtUnits = write.debtUnits;
          bucket.atUs = now;
          bucket.fullAtUs = fullAtUs;
          bucket.used = true;
        } else {
          if (buckets.size >= maxKeys) makeRoom(now);
          buckets.set(key, { debtUnits: write.debtUnits, atUs: now, fullAtUs, used: false });
        }
      } else if (write === null) {
        // Full again (or refunded to full): no state is a full bucket.
        buckets.delete(key);
      }
      if (op !== undefined) {
        pruneOps(now);
        const record: OpRecord = { allowed: r.allowed, debtUnits: r.debtUnits, atUs: now, fingerprint: op.fingerprint };
        if (r.tokens !== undefined) record.tokens = r.tokens;
        ops.delete(opKey);
        ops.set(opKey, { record, expiresAtUs: now + op.ttlMs * 1000 });
      }
      return r;
    },
    async step(key: string, args: StepArgs): Promise<StepResult> {
      return store.stepSync(key, args);
    },
    async reset(key: string): Promise<void> {
      buckets.delete(key);
    },
    async ping(): Promise<void> {},
  };
  return store;
}
