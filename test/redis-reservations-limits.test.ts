// Reservations on a policy of several limits in the Redis scripts (review R3): a take that waits for its
// slowest limit comes at its due time, so every other limit it charges counts it then (core/gcra.ts
// step), and a limit that refills sooner admits nothing on top of it. Real redis-server, the clock sent
// by the client (fake), through the single-key script and the batch script, on a plain key and on a key
// with numbers of its own (the record path).
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { stepArgs } from '../src/core/gcra.js';
import { baseNumbers } from '../src/core/override.js';
import { resolvePolicy, type ResolvedPolicy } from '../src/core/policy.js';
import type { StepArgs, Store } from '../src/store.js';
import { redisStore } from '../src/stores/redis.js';

let io: IORedis | undefined;
afterAll(() => io?.disconnect());
let run = 0;

/** A policy of two limits: `fast` (10 at fastPerSecond) and `slow` (10 at slowPerSecond). */
const policyOf = (fastPerSecond: number, slowPerSecond: number): ResolvedPolicy =>
  resolvePolicy('r', { limits: { fast: { capacity: 10, refillPerSecond: fastPerSecond }, slow: { capacity: 10, refillPerSecond: slowPerSecond } } }, { onStoreError: 'deny', timeoutMs: 1000 });
const T0 = 1_790_000_000_000_000;

/** A store on a fake clock (µs from T0) and a fresh key; batched, each step rides in a batch-script call with two peeks of other keys. */
function setup(batch: boolean) {
  io ??= new IORedis(inject('redisUrl'));
  let nowUs = T0;
  const inner = redisStore({ client: io, clientClock: true, nowMs: () => nowUs / 1000, ...(batch ? {} : { batch: false }) });
  const key = `resvl${run++}:${Math.random().toString(36).slice(2, 8)}`;
  const peek = (k: string, a: StepArgs) => inner.step(k, { limits: a.limits.map((l) => ({ ...l, costUnits: 0 })), ...(a.base ? { base: a.base } : {}) });
  const store: Store = batch ? { ...inner, step: (k, a, o) => Promise.all([peek(`${key}:before`, a), inner.step(k, a, o), peek(`${key}:after`, a)]).then(([, r]) => r) } : inner;
  const at = (ms: number) => (nowUs = T0 + ms * 1000);
  const take = async (policy: ResolvedPolicy, costs: number[], maxWaitMs: number) => (await store.step(key, stepArgs(policy, costs, maxWaitMs))).allowed;
  return { store, key, at, take, value: () => io!.get(key) };
}

/**
 * Takes of the fast limit alone ([1, 0]) at every ms from 1 to 700, as many as it admits each ms, after
 * a reservation of 10 of its tokens due at dueMs; every window [t1, t2] of it, the reservation counted
 * at dueMs, must hold at most its capacity (10) plus its refill in the window (1 a ms).
 */
async function fastWindows(take: (costs: number[], maxWaitMs: number) => Promise<boolean>, at: (ms: number) => void, dueMs: number) {
  const times: number[] = Array.from({ length: 10 }, () => dueMs);
  let firstMs: number | undefined;
  for (let ms = 1; ms <= 700; ms++) {
    at(ms);
    for (let k = 0; k < 12 && (await take([1, 0], 0)); k++) {
      times.push(ms);
      firstMs ??= ms;
    }
  }
  times.sort((a, b) => a - b);
  let worst = { over: -Infinity, t1: 0, t2: 0, count: 0 };
  // Sorted, the tokens of [times[i], times[j]] are i .. j, from the first of times[i] to the last of times[j].
  for (let i = 0; i < times.length; i++) {
    if (times[i - 1] === times[i]) continue;
    for (let j = i; j < times.length; j++) {
      if (times[j + 1] === times[j]) continue;
      const t1 = times[i]!, t2 = times[j]!;
      const count = j - i + 1;
      const over = count - (10 + (t2 - t1));
      if (over > worst.over) worst = { over, t1, t2, count };
    }
  }
  return { firstMs, worst };
}

for (const batch of [false, true]) {
  describe(`reservations on several limits (${batch ? 'batch' : 'single-key'} script, real Redis, fake clock)`, () => {
    it('a reservation held by the slow limit is charged on the fast one until it is due: its stored debt, and no take of the fast limit alone before then', async () => {
      const { at, take, value } = setup(batch);
      const policy = policyOf(1000, 10);
      const [fast, slow] = policy.limits as [ResolvedPolicy['limits'][0], ResolvedPolicy['limits'][0]];
      at(0);
      expect(await take(policy, [0, 10], 0)).toBe(true);
      // 10 of the fast limit and 5 of the slow one, waiting: the slow limit is 5 tokens over, due at
      // 500 ms (10/s). The fast limit is charged as a take at 500 ms: 500 ms of its refill plus the 10.
      expect(await take(policy, [10, 5], 1000)).toBe(true);
      const dueUs = T0 + 500_000;
      expect(await value()).toBe(`${500_000 * fast.refillUnitsPerUs + 10 * fast.tokenUnits}:${15 * slow.tokenUnits}:${T0}~${dueUs}`);
      const { firstMs, worst } = await fastWindows((c, w) => take(policy, c, w), at, 500);
      // Its 10 tokens come at 500 ms, so the next is 1 ms later (1000/s).
      expect(firstMs).toBe(501);
      expect(worst.over, `window ${worst.t1}..${worst.t2} ms holds ${worst.count} of the fast limit's tokens`).toBeLessThanOrEqual(0);
    });

    it('a key with numbers of its own (the record path): the reservation is charged on the fast limit at its due under those numbers', async () => {
      const { store, key, at, take } = setup(batch);
      const base = policyOf(1000, 100);
      at(0);
      // The key's own slow limit refills at 10/s: 5 tokens over it are due at 500 ms.
      await store.override!(key, { base: baseNumbers(base), limits: baseNumbers(policyOf(1000, 10)) });
      expect(await take(base, [0, 10], 0)).toBe(true);
      expect(await take(base, [10, 5], 1000)).toBe(true);
      const { firstMs, worst } = await fastWindows((c, w) => take(base, c, w), at, 500);
      expect(firstMs).toBe(501);
      expect(worst.over, `window ${worst.t1}..${worst.t2} ms holds ${worst.count} of the fast limit's tokens`).toBeLessThanOrEqual(0);
    });
  });
}
