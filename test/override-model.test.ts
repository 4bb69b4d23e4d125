// Runtime limits against the exact BigInt model (test/support/exact-override.ts), on a fake clock: the
// pure core (core/override.ts stepWithRecord and applyOverride, behind a store of plain maps) and the
// memory store. The Durable Object runs the same check in test/durable-object-store.test.ts, and the
// Redis scripts and the MongoDB pipeline in their own tests.
import fc from 'fast-check';
import { describe, it } from 'vitest';
import type { BucketState } from '../src/core/gcra.js';
import { applyOverride, stepWithRecord, type OverrideRecord } from '../src/core/override.js';
import type { Store } from '../src/store.js';
import { memoryStore } from '../src/stores/memory.js';
import { checkOverridesAgainstModel, overrideCaseArb } from './support/exact-override.js';

/** A store of the pure core alone: a bucket and a record per key in maps (copied, as storage would), on a fake clock. */
function pureStore(clock: { nowUs: number }): Store {
  const buckets = new Map<string, BucketState>();
  const records = new Map<string, OverrideRecord>();
  const apply = (key: string, w: { write?: BucketState | null; writeRecord?: OverrideRecord | null }) => {
    if (w.write) buckets.set(key, structuredClone(w.write));
    else if (w.write === null) buckets.delete(key);
    if (w.writeRecord) records.set(key, structuredClone(w.writeRecord));
    else if (w.writeRecord === null) records.delete(key);
  };
  return {
    name: 'pure',
    async step(key, args) {
      const r = stepWithRecord(buckets.get(key), clock.nowUs, args, records.get(key));
      apply(key, r);
      const { write: _w, writeRecord: _r, ...result } = r;
      return result;
    },
    async override(key, args) {
      const r = applyOverride(buckets.get(key), records.get(key), clock.nowUs, args);
      apply(key, r);
      const { write: _w, writeRecord: _r, ...result } = r;
      return result;
    },
    async reset(key) {
      buckets.delete(key);
    },
    async ping() {},
  };
}

describe('runtime limits against the exact model', () => {
  it('the pure core: numbers set and cleared mid-debt (all limits or one), their end, blocks, a policy-wide change, grants and late refunds', async () => {
    await fc.assert(
      fc.asyncProperty(overrideCaseArb(), async ({ base, ops }) => {
        const clock = { nowUs: 1_790_000_000_000_000 };
        await checkOverridesAgainstModel(pureStore(clock), 'k', (dt) => (clock.nowUs += dt), base, ops);
      }),
      { numRuns: 600 },
    );
  });
});

describe('the memory store against the exact model', () => {
  it('numbers set and cleared mid-debt, their end, blocks, a policy-wide change, grants and late refunds, on a fake clock', async () => {
    await fc.assert(
      fc.asyncProperty(overrideCaseArb(), async ({ base, ops }) => {
        let nowUs = 1_790_000_000_000_000;
        const store = memoryStore({ nowMs: () => nowUs / 1000 });
        await checkOverridesAgainstModel(store, 'k', (dt) => (nowUs += dt), base, ops);
      }),
      { numRuns: 400 },
    );
  });
});

describe('cases the property tests found', () => {
  it('a read of the key after its own numbers ended writes nothing: the step after it, under a change made at their end, carries from their end (the model had carried the read to the policy\'s numbers)', async () => {
    const base = [{ capacity: 12, p: 999999, q: 1 }, { capacity: 23, p: 440, q: 3 }, { capacity: 35, p: 500000, q: 1000000 }];
    const ops = [
      { kind: 'set', dtUs: 1000, limits: [{ capacity: 12, p: 1000000, q: 1 }, { capacity: 3, p: 1, q: 1 }, { capacity: 1, p: 10000, q: 1 }], forMs: 3 },
      { kind: 'take', dtUs: 2000, costs: [0, 1, 0], maxWaitMs: 0 },
      { kind: 'policy-set', dtUs: 1000, limits: [{ capacity: 1, p: 1, q: 1 }, { capacity: 1, p: 1, q: 1 }, { capacity: 1, p: 1000000, q: 1 }] },
      { kind: 'adjust', dtUs: 0, costs: [0, 0, 0] },
    ] as const;
    let nowUs = 1_790_000_000_000_000;
    await checkOverridesAgainstModel(memoryStore({ nowMs: () => nowUs / 1000 }), 'k', (dt) => (nowUs += dt), base, ops as never);
    const clock = { nowUs: 1_790_000_000_000_000 };
    await checkOverridesAgainstModel(pureStore(clock), 'k', (dt) => (clock.nowUs += dt), base, ops as never);
  });
});
