// 4 OS processes x 50 concurrent callers on one Redis bucket for 3 s: the admitted count is exact, in
// total and in every window (bench/accuracy.ts windowOver / windowUnder).
// The same with token leases on (10 tokens a grant): never over, and under by at most nodes x tokens.
// The processes are the benchmark's accuracy workers (bench/accuracy-worker.ts), started together.
import { expect, it, inject } from 'vitest';
import { accuracyRun, score } from '../../bench/accuracy.js';

it('4 processes x 50 callers for 3 s admit within [ideal - 1 - 0.5%, ideal]', { timeout: 60_000 }, async () => {
  const policy = { capacity: 20, refillPerSecond: 100 };
  const key = `contention-${Date.now()}`;
  const results = await accuracyRun(Array.from({ length: 4 }, () => ({ config: { mode: 'ours' as const, callers: 50, durationMs: 3000, policy, key, redisUrl: inject('redisUrl') } })));
  const a = score(results, policy);
  console.log(`[contention] decisions=${a.decisions} admitted=${a.admitted} ideal∈[${a.idealMin.toFixed(2)}, ${a.idealMax.toFixed(2)}] window over=${a.windowOver} under=${a.windowUnder}`);
  expect(a.errors).toBe(0);
  expect(a.windowOver).toBe(0);
  expect(a.windowUnder).toBe(0);
  expect(a.decisions).toBeGreaterThan(a.admitted * 5);
  expect(a.admitted).toBeLessThanOrEqual(Math.floor(a.idealMax));
  expect(a.admitted).toBeGreaterThanOrEqual(Math.floor(a.idealMin - 1 - a.idealMin * 0.005));
});

it('with token leases (10 a grant): 4 processes x 50 callers admit within [ideal - 1 - 0.5% - 4 x 10, ideal]', { timeout: 60_000 }, async () => {
  const policy = { capacity: 20, refillPerSecond: 100, lease: { tokens: 10, maxAgeMs: 1000 } };
  const key = `contention-lease-${Date.now()}`;
  const results = await accuracyRun(Array.from({ length: 4 }, () => ({ config: { mode: 'ours' as const, callers: 50, durationMs: 3000, policy, key, redisUrl: inject('redisUrl') } })));
  // The README's lease bound: a leased token is spent at most tokens x intervalMs (100 ms) after the
  // store counted it, and at most nodes x tokens sit unused.
  const a = score(results, policy, { spendLagMs: 10 * (1000 / policy.refillPerSecond), heldTokens: 4 * 10 });
  console.log(`[contention, leases] decisions=${a.decisions} admitted=${a.admitted} ideal∈[${a.idealMin.toFixed(2)}, ${a.idealMax.toFixed(2)}] under=${a.under} window over=${a.windowOver} under=${a.windowUnder}`);
  expect(a.errors).toBe(0);
  expect(a.windowOver).toBe(0);
  expect(a.windowUnder).toBe(0);
  expect(a.decisions).toBeGreaterThan(a.admitted * 5);
  expect(a.admitted).toBeLessThanOrEqual(Math.floor(a.idealMax));
  expect(a.admitted).toBeGreaterThanOrEqual(Math.floor(a.idealMin - 1 - a.idealMin * 0.005) - 4 * 10);
});
