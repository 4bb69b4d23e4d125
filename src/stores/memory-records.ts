// The memory store's override records (core/override-types.ts), by storage key, kept beside its slots
// rather than in them: a key with none costs a step nothing but `map.size !== 0`. A record a step
// installed for a policy-wide change goes with its bucket (the next step installs it again, with nothing
// to carry) and is not counted; every other one stays until it ends or is cleared, however buckets come
// and go, and at most maxOverrides of them are kept. The policy-wide change itself (written with its
// id, not by a step: one per policy) is not counted either, so a full store still takes an incident's
// policy-wide change. Records that have ended (a block past its end, numbers past theirs on a bucket
// full by then) are dropped when their room is needed (review 5, L2).
import type { OverrideRecord } from '../core/override-types.js';
import { ConfigError, StoreError } from '../errors.js';

/** The records of one memory store. */
export interface MemoryRecords {
  /** The records by storage key, read directly by the store's steps (`size`, `get`, `has`). */
  readonly map: Map<string, OverrideRecord>;
  /**
   * Sets the key's record (null: deletes it). A key's copy of a policy-wide change with no block goes
   * with the bucket and is not counted. `byStep`: written by a step (never refused). `policyOwn`: the policy-wide change itself (an override
   * that sets numbers with a change's id: Limiter.setPolicyLimits on the policy's key), not counted.
   * Setting one more than maxOverrides (not by a step) is a StoreError naming the option, and changes
   * nothing.
   */
  set(key: string, next: OverrideRecord | null, byStep: boolean, policyOwn?: boolean): void;
  /** Whether the key's record goes with its bucket (a step installed it for a policy-wide change). */
  goesWithBucket(key: string): boolean;
}

/** What the records need of their store to give back the room of ended ones. */
export interface RecordBuckets {
  nowUs(): number;
  /** Whether the key's bucket was full at untilUs (or there is none): then it is dropped, and true. */
  bucketFull(key: string, untilUs: number): boolean;
}

/**
 * The records of a memory store with `maxOverrides` (MemoryStoreOptions.maxOverrides). When a record
 * would be refused for room, the counted ones that have ended and hold nothing a step still needs go
 * first: a block past its end (no numbers; on a copy of a policy-wide change the copy stays, not
 * counted), or numbers past their end on a bucket that was full by then (nothing to carry: the bucket
 * goes too). A bucket not full at its numbers' end keeps its record, counted, for the carry at its next step.
 */
export function memoryRecords(maxOverrides: number, buckets?: RecordBuckets): MemoryRecords {
  if (!Number.isInteger(maxOverrides) || maxOverrides < 1) throw new ConfigError('maxOverrides', `must be a positive integer, got ${String(maxOverrides)}`);
  const map = new Map<string, OverrideRecord>();
  // Records not counted against maxOverrides: installed by a step, or a policy's own change.
  const uncounted = new WeakSet<OverrideRecord>();
  const installed = new WeakSet<OverrideRecord>();
  let uncountedCount = 0;
  function sweep(): void {
    if (!buckets) return;
    const now = buckets.nowUs();
    for (const [k, r] of map) {
      if (r.blockedUntilUs !== undefined && r.blockedUntilUs > now) continue;
      if (r.policyId !== undefined) {
        // A copy of a policy-wide change (or a marker) whose block ended: counted for the block alone,
        // so it stays without it, as a step installs one (review 7: an incident's blocks filled the room).
        if (r.blockedUntilUs !== undefined) {
          const { blockedUntilUs: _ended, ...copy } = r;
          records.set(k, copy, true);
        }
        continue;
      }
      if (r.limits !== undefined && (r.untilUs === undefined || r.untilUs > now || !buckets.bucketFull(k, r.untilUs))) continue;
      records.set(k, null, true);
    }
  }
  const records: MemoryRecords = {
    map,
    set(key, next, byStep, policyOwn = false) {
      const cur = map.get(key);
      const counted = cur !== undefined && !uncounted.has(cur);
      // A key's copy of a policy-wide change with no block (a step installed it, or an unblock left it)
      // goes with the bucket and is not counted.
      const goes = next !== null && !policyOwn && next.policyId !== undefined && next.blockedUntilUs === undefined;
      const full = () => map.size - uncountedCount >= maxOverrides;
      if (next !== null && !byStep && !policyOwn && !goes && !counted && full() && (sweep(), full())) {
        throw new StoreError('memory', `maxOverrides (${maxOverrides}) reached: no room for another key's override record (raise it, or clear some)`, { permanent: 'full' });
      }
      if (cur !== undefined && uncounted.has(cur)) {
        uncounted.delete(cur);
        uncountedCount--;
      }
      if (cur !== undefined) installed.delete(cur);
      if (next === null) {
        map.delete(key);
        return;
      }
      map.set(key, next);
      if (goes) installed.add(next);
      if (goes || policyOwn) {
        uncounted.add(next);
        uncountedCount++;
      }
    },
    goesWithBucket(key) {
      const r = map.get(key);
      return r !== undefined && installed.has(r);
    },
  };
  return records;
}
