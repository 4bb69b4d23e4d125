// Reservations through a change of numbers in the Redis scripts (core's BucketState.reservedUntilUs):
// a take that waits keeps in the stored value when it is due ("~<reservedUntilUs>" after the bucket),
// a change before then carries the bucket as it will stand then, so nothing under the new numbers is
// admitted before or on top of the reservations granted, and a cost above a key's own capacity is
// refused rather than reserved as one burst. Real redis-server, the clock sent by the client (fake),
// through the single-key script and the batch script.
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { adjustArgs, stepArgs } from '../src/core/gcra.js';
import { baseNumbers } from '../src/core/override.js';
import { resolvePolicy, type ResolvedPolicy } from '../src/core/policy.js';
import type { StepArgs, Store } from '../src/store.js';
import { redisStore } from '../src/stores/redis.js';

let io: IORedis | undefined;
afterAll(() => io?.disconnect());
let run = 0;

const policyOf = (capacity: number, refillPerSecond: number): ResolvedPolicy => resolvePolicy('r', { capacity, refillPerSecond }, { onStoreError: 'deny', timeoutMs: 1000 });
const T0 = 1_790_000_000_000_000;

/** A store on a fake clock (µs from T0) and a fresh key; batched, each step rides in a batch-script call with two peeks of other keys. */
function setup(batch: boolean) {
  io ??= new IORedis(inject('redisUrl'));
  let nowUs = T0;
  const inner = redisStore({ client: io, clientClock: true, nowMs: () => nowUs / 1000, ...(batch ? {} : { batch: false }) });
  const key = `resv${run++}:${Math.random().toString(36).slice(2, 8)}`;
  const peek = (k: string, a: StepArgs) => inner.step(k, { limits: a.limits.map((l) => ({ ...l, costUnits: 0 })), ...(a.base ? { base: a.base } : {}) });
  const store: Store = batch ? { ...inner, step: (k, a, o) => Promise.all([peek(`${key}:before`, a), inner.step(k, a, o), peek(`${key}:after`, a)]).then(([, r]) => r) } : inner;
  const at = (ms: number) => (nowUs = T0 + ms * 1000);
  const take = async (policy: ResolvedPolicy, cost: number, maxWaitMs: number) => (await store.step(key, stepArgs(policy, cost, maxWaitMs))).allowed;
  return { store, key, at, take, value: () => io!.get(key) };
}

for (const batch of [false, true]) {
  describe(`reservations through a change of numbers (${batch ? 'batch' : 'single-key'} script, real Redis, fake clock)`, () => {
    it('a key with a reservation pending, changed to a faster rate: nothing is admitted before the reservation is due', async () => {
      const { store, key, at, take } = setup(batch);
      const base = policyOf(10, 10);
      at(0);
      expect(await take(base, 10, 0)).toBe(true);
      // 5 more, waiting: due when the bucket has refilled 5 tokens at 10/s, 500 ms on.
      expect(await take(base, 5, 1000)).toBe(true);
      at(1);
      await store.override!(key, { base: baseNumbers(base), limits: baseNumbers(policyOf(10, 100)) });
      // Counted at 100/s the 15 tokens owed would be paid by 150 ms: takes from there would come on
      // top of the reservation, which the caller makes at 500 ms.
      for (const ms of [60, 200, 300, 450, 499]) {
        at(ms);
        expect(await take(base, 1, 0), `a take at ${ms} ms`).toBe(false);
      }
      at(520);
      expect(await take(base, 1, 0)).toBe(true);
    });

    for (const end of ['clear', 'expiry'] as const) {
      it(`a reservation under a key's own slower numbers keeps its time when they ${end === 'clear' ? 'are cleared' : 'end'} and the faster base is back`, async () => {
        const { store, key, at, take } = setup(batch);
        const base = policyOf(10, 100);
        at(0);
        await store.override!(key, { base: baseNumbers(base), limits: baseNumbers(policyOf(10, 10)), ...(end === 'expiry' ? { forMs: 100 } : {}) });
        expect(await take(base, 10, 0)).toBe(true);
        // Under the key's 10/s: 5 tokens over, due at 500 ms.
        expect(await take(base, 5, 1000)).toBe(true);
        if (end === 'clear') {
          at(1);
          await store.override!(key, { base: baseNumbers(base), limits: null });
        }
        for (const ms of [150, 300, 499]) {
          at(ms);
          expect(await take(base, 1, 0), `${end}: a take at ${ms} ms`).toBe(false);
        }
        at(520);
        expect(await take(base, 1, 0), `${end}: a take after the reservation is due`).toBe(true);
      });
    }

    it('the stored value holds when the reservation is due while it is pending, and today\'s format without one', async () => {
      const { at, take, value } = setup(batch);
      const base = policyOf(10, 10);
      at(0);
      expect(await take(base, 3, 0)).toBe(true);
      expect(await value()).toMatch(/^\d+:\d+$/);
      // A take that waits but stays within the capacity is no reservation.
      expect(await take(base, 7, 1000)).toBe(true);
      expect(await value()).toMatch(/^\d+:\d+$/);
      at(2);
      expect(await take(base, 5, 1000)).toBe(true);
      // 10 tokens less 2 ms of refill, and 5: over the capacity by 5 tokens less 2 ms, due that long after.
      const { tokenUnits: u, refillUnitsPerUs: r } = base.limits[0]!;
      expect(await value()).toBe(`${15 * u - 2000 * r}:${T0 + 2000}~${T0 + 2000 + Math.ceil((5 * u - 2000 * r) / r)}`);
      // A write while it is pending (a take that waits, within the wait) keeps the later due: 14 tokens
      // at 100 ms, and 1: 5 over, 500 ms on.
      at(100);
      expect(await take(base, 1, 1000)).toBe(true);
      expect(await value()).toBe(`${15 * u}:${T0 + 100_000}~${T0 + 600_000}`);
      // After it: a take with no wait writes the usual value (8 tokens left at 800 ms, and 1).
      at(800);
      expect(await take(base, 1, 0)).toBe(true);
      expect(await value()).toBe(`${9 * u}:${T0 + 800_000}`);
    });

    it("a change in the ms between a reservation's slot and its caller counts nothing of the old rate's refill since the slot to the caller's token (review 3, F6)", async () => {
      const { store, key, at, take } = setup(batch);
      const third = policyOf(1, 3);
      at(0);
      expect(await take(third, 1, 0)).toBe(true);
      // Its slot 333.334 ms on, its caller told 334 ms; the key moves to 1 a second then.
      expect(await take(third, 1, 400)).toBe(true);
      at(334);
      await store.override!(key, { base: baseNumbers(third), limits: baseNumbers(policyOf(1, 1)) });
      at(1333);
      expect(await take(third, 1, 0)).toBe(false);
      at(1336);
      expect(await take(third, 1, 0)).toBe(true);
    });

    it('what such a change does not count is at most what the reservations of that ms took (review 15, F1)', async () => {
      const { store, key, at, take } = setup(batch);
      const fast = policyOf(10, 1_000_000);
      at(0);
      expect(await take(fast, 10, 0)).toBe(true);
      // Its slot 1 µs on, its caller told 1 ms; the key moves to 5 a second then: 11 tokens owed (the
      // capacity and 1 µs of refill), not 1,000 (1 ms of 1e6 a second).
      expect(await take(fast, 1, 5)).toBe(true);
      at(1);
      await store.override!(key, { base: baseNumbers(fast), limits: baseNumbers(policyOf(5, 1)) });
      const peek = await store.step(key, stepArgs(fast, 0, 0));
      expect(peek.debtUnits[0]! / baseNumbers(policyOf(5, 1))[0]!.tokenUnits).toBe(11);
    });

    it("a refund between a reservation's slot and its caller gives back none of what the reservation holds (review 16, F1)", async () => {
      const { store, key, at, take } = setup(batch);
      const tenth = policyOf(1, 10);
      at(0);
      expect(await take(tenth, 1, 0)).toBe(true);
      // Its slot at 100 ms, its caller at 100.5 ms; a refund at 100.2 ms, a take at 100.7 ms.
      at(0.5);
      expect(await take(tenth, 1, 1000)).toBe(true);
      at(100.2);
      await store.step(key, adjustArgs(tenth, -1));
      at(100.7);
      expect(await take(tenth, 1, 0)).toBe(false);
      at(200);
      expect(await take(tenth, 1, 0)).toBe(true);
    });

    it("a bucket full again before its reservation's caller comes is kept until then (review 15, F2)", async () => {
      const { store, key, at, take, value } = setup(batch);
      const fast = policyOf(10, 1_000_000);
      at(0);
      expect(await take(fast, 10, 0)).toBe(true);
      expect(await take(fast, 1, 5)).toBe(true);
      // At the caller's ms a refund finds nothing to give back: the value stays, with its horizon.
      at(1);
      await store.step(key, adjustArgs(fast, -1));
      expect(await value()).toBe(`0:${T0 + 1000}~${T0 + 1}`);
      await store.override!(key, { base: baseNumbers(fast), limits: baseNumbers(policyOf(5, 1)) });
      const peek = await store.step(key, stepArgs(fast, 0, 0));
      expect(peek.debtUnits[0]! / baseNumbers(policyOf(5, 1))[0]!.tokenUnits).toBe(11);
    });

    it("a take whose cost is above the key's own lower capacity is refused, even with a wait", async () => {
      const { store, key, at, take, value } = setup(batch);
      const base = policyOf(10, 10);
      at(0);
      await store.override!(key, { base: baseNumbers(base), limits: baseNumbers(policyOf(3, 10)) });
      const before = await value();
      expect(await take(base, 5, 5000)).toBe(false);
      expect(await value()).toBe(before);
      expect(await take(base, 3, 5000)).toBe(true);
      expect(await take(base, 2, 5000)).toBe(true);
    });
  });
}
