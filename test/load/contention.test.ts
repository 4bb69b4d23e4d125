// 4 OS processes x 50 concurrent callers on one Redis bucket for 3 s: the admitted count is exact, in
// total and in every window (bench/accuracy.ts windowOver / windowUnder).
// The same with token leases on (10 tokens a grant): never over, and under by at most nodes x tokens.
// The processes are the benchmark's accuracy workers (bench/accuracy-worker.ts), started together.
// And a policy of two limits through two Node servers on one Redis: each limit exact in every window.
import { expect, it, inject } from 'vitest';
import { accuracyRun, score } from '../../bench/accuracy.js';
import { startNodeServer } from '../support/node-server.js';

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
  // The lease bound of docs/leases.md: a leased token is spent at most tokens x intervalMs (100 ms) after the
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

it('two servers, one policy of two limits (a burst of 20 at 100/s and a sustained 50 at 40/s), 4 processes x 25 callers for 3 s: per limit, 0 over in every window, and the sustained limit never left unused', { timeout: 90_000 }, async () => {
  const limits = { burst: { capacity: 20, refillPerSecond: 100 }, sustained: { capacity: 50, refillPerSecond: 40 } };
  const token = 'contention-two-limits';
  const env = { REDIS_URL: inject('redisUrl'), PERMIT_TOKENS: token, LIMITER_POLICIES: JSON.stringify({ contention: { limits } }) };
  const servers = [await startNodeServer(env), await startNodeServer(env)];
  try {
    const key = `contention-two-${Date.now()}`;
    const targets = servers.map((s) => s.url);
    const results = await accuracyRun(
      Array.from({ length: 4 }, () => ({ config: { mode: 'http' as const, callers: 25, durationMs: 3000, policy: limits.sustained, key, targets, token, policyName: 'contention' } })),
    );
    const burst = score(results, limits.burst);
    const sustained = score(results, limits.sustained);
    console.log(
      `[contention, two limits over two servers] decisions=${burst.decisions} admitted=${burst.admitted} burst: window over=${burst.windowOver}; sustained: ideal∈[${sustained.idealMin.toFixed(2)}, ${sustained.idealMax.toFixed(2)}] window over=${sustained.windowOver} under=${sustained.windowUnder}`,
    );
    expect(burst.errors).toBe(0);
    // No window of the run admits more than either limit allows in it...
    expect(burst.windowOver).toBe(0);
    expect(sustained.windowOver).toBe(0);
    // ...and, the callers never stopping, every window uses the slower limit's whole refill: the
    // binding limit is never left with tokens to give (its own ideal, per window).
    expect(sustained.windowUnder).toBe(0);
    expect(burst.decisions).toBeGreaterThan(burst.admitted * 2);
    expect(sustained.admitted).toBeLessThanOrEqual(Math.floor(sustained.idealMax));
    expect(sustained.admitted).toBeGreaterThanOrEqual(Math.floor(sustained.idealMin - 1));
  } finally {
    for (const s of servers) expect(await s.stop()).toBe(0);
  }
});
