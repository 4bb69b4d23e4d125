// A store that keeps override records, for the limiter's tests of runtime limits: the pure core's
// stepWithRecord and applyOverride over a Map, on a clock the test sets (µs). Each call is one atomic
// step, as every built-in store's is; `failing` makes every call reject (a store that is down).
import { stepWithRecord, applyOverride, type OverrideArgs, type OverrideRecord, type OverrideResult } from '../../src/core/override.js';
import type { BucketState } from '../../src/core/gcra.js';
import type { StepArgs, StepResult, Store } from '../../src/store.js';

export interface RecordStore extends Store {
  override(key: string, args: OverrideArgs): Promise<OverrideResult>;
  /** The store's clock, µs. */
  nowUs: number;
  /** Every call rejects while true. */
  failing: boolean;
  /** Calls of each kind, for tests that count store reads. */
  calls: { step: number; override: number };
  buckets: Map<string, BucketState>;
  records: Map<string, OverrideRecord>;
}

export function recordStore(startUs = 1_000_000_000): RecordStore {
  const buckets = new Map<string, BucketState>();
  const records = new Map<string, OverrideRecord>();
  const s: RecordStore = {
    name: 'record-test',
    nowUs: startUs,
    failing: false,
    calls: { step: 0, override: 0 },
    buckets,
    records,
    async step(key: string, args: StepArgs): Promise<StepResult> {
      s.calls.step++;
      if (s.failing) throw new Error('store down');
      const r = stepWithRecord(buckets.get(key), s.nowUs, args, records.get(key));
      const { write, writeRecord, ...result } = r;
      if (write === null) buckets.delete(key);
      else if (write) buckets.set(key, { debtUnits: [...write.debtUnits], atUs: write.atUs });
      if (writeRecord === null) records.delete(key);
      else if (writeRecord) records.set(key, writeRecord);
      return result;
    },
    async override(key: string, args: OverrideArgs): Promise<OverrideResult> {
      s.calls.override++;
      if (s.failing) throw new Error('store down');
      const { write, writeRecord, ...result } = applyOverride(buckets.get(key), records.get(key), s.nowUs, args);
      if (write === null) buckets.delete(key);
      else if (write) buckets.set(key, { debtUnits: [...write.debtUnits], atUs: write.atUs });
      if (writeRecord === null) records.delete(key);
      else if (writeRecord) records.set(key, writeRecord);
      return result;
    },
    async reset(key: string) {
      if (s.failing) throw new Error('store down');
      buckets.delete(key);
    },
    async ping() {
      if (s.failing) throw new Error('store down');
    },
  };
  return s;
}
