// Inside workerd, end to end: `npm run dev -- --durable-object` (wrangler dev, the Worker entry and
// wrangler.toml's LIMITER_DO binding). Two processes x 32 callers on one key for 2.5 s through POST
// /v1/permits (the benchmark's accuracy workers, one time base): never over the ideal, exact within
// the usual floor; then the same with token leases on, where the Worker's lease refills in the
// background through ctx.waitUntil.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { accuracyRun, score } from '../../bench/accuracy.js';
import { startDevWorker, type DevWorker } from '../support/worker.js';

const TOKEN = 'do-token';
// A slow refill, so that even wrangler dev's modest throughput (200-350 permits/s here) is far above it.
const POLICY = { capacity: 10, refillPerSecond: 20 };
let worker: DevWorker;

beforeAll(async () => {
  worker = await startDevWorker(
    { PERMIT_TOKENS: TOKEN, LIMITER_POLICIES: JSON.stringify({ plain: POLICY, leased: { ...POLICY, lease: { tokens: 5, maxAgeMs: 1000 } } }) },
    ['--durable-object'],
  );
}, 120_000);
afterAll(async () => {
  await worker?.stop();
});

const hammer = (policyName: string, key: string) =>
  accuracyRun(
    Array.from({ length: 2 }, () => ({
      config: { mode: 'http' as const, callers: 32, durationMs: 2500, policy: POLICY, policyName, key, targets: [worker.url], token: TOKEN },
    })),
  ).then((results) => score(results, POLICY));

it('RateLimiterObject behind the Worker: 64 callers on one key admit within [ideal - 1 - 0.5%, ideal]', async () => {
  const a = await hammer('plain', `do-${Date.now()}`);
  console.log(`[durable object] decisions=${a.decisions} admitted=${a.admitted} ideal∈[${a.idealMin.toFixed(2)}, ${a.idealMax.toFixed(2)}]`);
  expect(a.errors).toBe(0);
  expect(a.decisions).toBeGreaterThan(a.admitted * 2);
  expect(a.admitted).toBeLessThanOrEqual(Math.floor(a.idealMax));
  expect(a.admitted).toBeGreaterThanOrEqual(Math.floor(a.idealMin - 1 - a.idealMin * 0.005));
}, 60_000);

it('with token leases (5 a grant) in the Worker: never over; under by at most one isolate x 5', async () => {
  const a = await hammer('leased', `do-lease-${Date.now()}`);
  console.log(`[durable object, leases] decisions=${a.decisions} admitted=${a.admitted} ideal∈[${a.idealMin.toFixed(2)}, ${a.idealMax.toFixed(2)}]`);
  expect(a.errors).toBe(0);
  expect(a.admitted).toBeLessThanOrEqual(Math.floor(a.idealMax));
  expect(a.admitted).toBeGreaterThanOrEqual(Math.floor(a.idealMin - 1 - a.idealMin * 0.005) - 5);
  // The isolate holds the key's lease (the health answer reports this node's leases).
  const health = (await (await fetch(`${worker.url}/healthz`)).json()) as { leases: { keys: number } };
  expect(health.leases.keys).toBeGreaterThanOrEqual(1);
}, 60_000);
