// The BigInt model of runtime limits (test/support/exact-override.ts) against the stores that run their
// own code for it, on a fake clock: the Redis scripts (single-key and batched, over a real redis-server,
// with the clock sent by the client) and the MongoDB pipeline (evaluated by mingo, $$NOW on a fake
// Date.now). The pure core and the memory store run it in test/override-model.test.ts, the Durable
// Object in test/durable-object-store.test.ts.
import fc from 'fast-check';
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, inject, it, vi } from 'vitest';
import type { StepArgs, Store } from '../src/store.js';
import { mongoStore } from '../src/stores/mongodb.js';
import { redisStore } from '../src/stores/redis.js';
import { checkOverridesAgainstModel, overrideCaseArb } from './support/exact-override.js';
import { MingoCollection } from './support/mingo-collection.js';

let io: IORedis | undefined;
afterAll(() => io?.disconnect());
let run = 0;

describe('runtime limits against the exact model: the Redis scripts (fake clock, real Redis)', () => {
  for (const batch of [false, true]) {
    it(`${batch ? 'batch script (each step in a call with two other keys)' : 'single-key script'} and the override script: numbers set and cleared mid-debt, their end, blocks, a policy-wide change, grants and late refunds`, async () => {
      io ??= new IORedis(inject('redisUrl'));
      await fc.assert(
        fc.asyncProperty(overrideCaseArb(1, 30), async ({ base, ops }) => {
          let nowUs = 1_790_000_000_000_000;
          const inner = redisStore({ client: io!, clientClock: true, nowMs: () => nowUs / 1000, ...(batch ? {} : { batch: false }) });
          const key = `ovm${run++}:${Math.random().toString(36).slice(2, 8)}`;
          // Batched: each step goes between two peeks of other keys, so that it rides in a call of the
          // batch script (the first of a burst goes alone at once, the ones queued behind it together).
          const peek = (k: string, a: StepArgs) => inner.step(k, { limits: a.limits.map((l) => ({ ...l, costUnits: 0 })), ...(a.base ? { base: a.base } : {}) });
          const store: Store = batch
            ? { ...inner, step: (k, a, o) => Promise.all([peek(`${key}:before`, a), inner.step(k, a, o), peek(`${key}:after`, a)]).then(([, r]) => r) }
            : inner;
          await checkOverridesAgainstModel(store, key, (dt) => (nowUs += dt), base, ops);
        }),
        { numRuns: 120 },
      );
    }, 120_000);
  }
});

describe('runtime limits against the exact model: the MongoDB pipeline (mingo, $$NOW on a fake clock)', () => {
  it('steps and overrides: numbers set and cleared mid-debt, their end, blocks, a policy-wide change, grants and late refunds (1 ms clock)', async () => {
    let now = 1_790_000_000_000;
    const spy = vi.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      await fc.assert(
        fc.asyncProperty(overrideCaseArb(1000, 30), async ({ base, ops }) => {
          await checkOverridesAgainstModel(mongoStore({ collection: new MingoCollection() }), 'k', (dt) => (now += dt / 1000), base, ops);
        }),
        { numRuns: 150 },
      );
    } finally {
      spy.mockRestore();
    }
  }, 120_000);
});
