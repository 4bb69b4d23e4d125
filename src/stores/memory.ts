// The embedded default store: buckets in a Map in this process. It is its own store, so the process's
// monotonic clock is the store clock. Bounded by maxKeys.
import { step } from '../core/gcra.js';
import { ConfigError } from '../errors.js';
import type { StepArgs, StepResult, Store } from '../store.js';

export interface MemoryStoreOptions {
  /**
   * Most buckets kept. When a new bucket would exceed it, full buckets (which hold no information)
   * are dropped first, then the least recently used one. Dropping a non-full bucket refills it, so
   * size this above the number of keys active within one refill window.
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

export function memoryStore(options: MemoryStoreOptions = {}): MemoryStore {
  const maxKeys = options.maxKeys ?? 100_000;
  if (!Number.isInteger(maxKeys) || maxKeys < 1) throw new ConfigError('maxKeys', `must be a positive integer, got ${String(maxKeys)}`);
  const origin = performance.timeOrigin;
  const nowMs = options.nowMs ?? (() => origin + performance.now());
  // Insertion order is recency order: every access deletes and re-inserts.
  const buckets = new Map<string, number>();
  let evictedActive = 0;

  function makeRoom(now: number): void {
    let seen = 0;
    let dropped = 0;
    for (const [k, tat] of buckets) {
      if (tat <= now) {
        buckets.delete(k);
        dropped++;
      }
      if (++seen >= SWEEP_BATCH) break;
    }
    if (dropped === 0) {
      const oldest = buckets.keys().next();
      if (!oldest.done) {
        buckets.delete(oldest.value);
        evictedActive++;
      }
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
      const tat = buckets.get(key);
      const r = step(tat, now, args);
      if (tat !== undefined) buckets.delete(key);
      if (r.tatMs !== undefined && r.tatMs > now) {
        if (tat === undefined && buckets.size >= maxKeys) makeRoom(now);
        buckets.set(key, r.tatMs);
      }
      return r.units === undefined ? { allowed: r.allowed, debtMs: r.debtMs } : { allowed: r.allowed, debtMs: r.debtMs, units: r.units };
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
