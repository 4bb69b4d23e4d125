// The embedded default store: buckets in a Map in this process. It is its own store, so the process's
// monotonic clock is the store clock. Bounded by maxKeys.
import { step } from '../core/gcra.js';
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
  /** The clock, in ms. Tests pass a fake one. @default performance.timeOrigin + performance.now() */
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

/** A bucket: its TAT, and whether it was used since the eviction hand last passed it (second chance). */
interface Bucket {
  tatMs: number;
  used: boolean;
}

export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  const maxKeys = options.maxKeys ?? 100_000;
  if (!Number.isInteger(maxKeys) || maxKeys < 1) throw new ConfigError('maxKeys', `must be a positive integer, got ${String(maxKeys)}`);
  // `performance` is read once: on Node the global is a getter, which costs ~30 ns on every read.
  const perf = performance;
  const origin = perf.timeOrigin;
  const nowMs = options.nowMs ?? (() => origin + perf.now());
  // Recency is approximate (CLOCK / second chance): an access only sets `used`, so a hot bucket costs
  // one lookup, not a delete and re-insert. Eviction walks from the oldest insertion: full buckets go,
  // used ones get a second chance (flag cleared, moved to the back), and the first unused one goes.
  const buckets = new Map<string, Bucket>();
  let evictedActive = 0;

  function makeRoom(now: number): void {
    let seen = 0;
    let dropped = 0;
    for (const [k, b] of buckets) {
      if (b.tatMs <= now) {
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
      const now = nowMs();
      const bucket = buckets.get(key);
      const r = step(bucket?.tatMs, now, args);
      if (r.tatMs !== undefined && r.tatMs > now) {
        if (bucket) {
          bucket.tatMs = r.tatMs;
          bucket.used = true;
        } else {
          if (buckets.size >= maxKeys) makeRoom(now);
          buckets.set(key, { tatMs: r.tatMs, used: false });
        }
      } else if (bucket) {
        // Full again (or refunded to full): no state is a full bucket.
        buckets.delete(key);
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
