// 4 OS processes x 50 concurrent callers on one Redis bucket for 3 s: the admitted count is exact.
import { expect, it, inject } from 'vitest';
import { runContention } from '../support/contention.js';

it('4 processes x 50 callers for 3 s admit within [ideal - 1 - 0.5%, ideal]', { timeout: 60_000 }, async () => {
  const policy = { capacity: 20, refillPerSecond: 100 };
  const r = await runContention({
    redisUrl: inject('redisUrl'),
    policy,
    processes: 4,
    callersPerProcess: 50,
    durationMs: 3000,
    key: `contention-${Date.now()}`,
  });
  const idealMax = policy.capacity + (policy.refillPerSecond * r.maxSpanMs) / 1000;
  const idealMin = policy.capacity + (policy.refillPerSecond * r.minSpanMs) / 1000;
  console.log(
    `[contention] decisions=${r.decisions} admitted=${r.admitted} ideal∈[${idealMin.toFixed(2)}, ${idealMax.toFixed(2)}] span∈[${r.minSpanMs.toFixed(1)}, ${r.maxSpanMs.toFixed(1)}] ms`,
  );
  expect(r.errors).toBe(0);
  expect(r.decisions).toBeGreaterThan(r.admitted * 5);
  expect(r.admitted).toBeLessThanOrEqual(Math.floor(idealMax));
  expect(r.admitted).toBeGreaterThanOrEqual(Math.floor(idealMin - 1 - idealMin * 0.005));
});
