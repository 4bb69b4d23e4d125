// Inside workerd, end to end: `npm run dev -- --durable-object` (wrangler dev, the Worker entry and
// wrangler.toml's LIMITER_DO binding). 64 concurrent callers on one key for 2.5 s through POST
// /v1/permits: never over the ideal, and exact within the usual floor; then the same with token leases
// on, where the lease refills in the background through ctx.waitUntil.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startDevWorker, type DevWorker } from '../support/worker.js';

const TOKEN = 'do-token';
const POLICY = { capacity: 20, refillPerSecond: 100 };
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

async function hammer(policy: string, key: string, callers: number, durationMs: number) {
  const body = JSON.stringify({ policy, key });
  const go = performance.now();
  let admitted = 0;
  let decisions = 0;
  let errors = 0;
  let firstEnd = Infinity;
  let firstStart = Infinity;
  let lastStart = 0;
  let lastEnd = 0;
  const reasons = new Map<string, number>();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (performance.now() - go < durationMs) {
        const s = performance.now();
        const res = await fetch(`${worker.url}/v1/permits`, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' }, body });
        const b = (await res.json()) as { allowed?: boolean; reason?: string };
        const e = performance.now();
        if (res.status !== 200 && res.status !== 429) {
          errors++;
          continue;
        }
        decisions++;
        if (b.reason) reasons.set(b.reason, (reasons.get(b.reason) ?? 0) + 1);
        firstStart = Math.min(firstStart, s);
        firstEnd = Math.min(firstEnd, e);
        lastStart = Math.max(lastStart, s);
        lastEnd = Math.max(lastEnd, e);
        if (b.allowed) admitted++;
      }
    }),
  );
  const idealMin = POLICY.capacity + (POLICY.refillPerSecond * (lastStart - firstEnd)) / 1000;
  const idealMax = POLICY.capacity + (POLICY.refillPerSecond * (lastEnd - firstStart)) / 1000;
  return { admitted, decisions, errors, idealMin, idealMax, reasons };
}

it('RateLimiterObject behind the Worker: 64 callers on one key admit within [ideal - 1 - 0.5%, ideal]', async () => {
  const a = await hammer('plain', `do-${Date.now()}`, 64, 2500);
  console.log(`[durable object] decisions=${a.decisions} admitted=${a.admitted} ideal∈[${a.idealMin.toFixed(2)}, ${a.idealMax.toFixed(2)}]`);
  expect(a.errors).toBe(0);
  expect(a.reasons.size).toBe(0);
  expect(a.decisions).toBeGreaterThan(a.admitted * 2);
  expect(a.admitted).toBeLessThanOrEqual(Math.floor(a.idealMax));
  expect(a.admitted).toBeGreaterThanOrEqual(Math.floor(a.idealMin - 1 - a.idealMin * 0.005));
}, 60_000);

it('with token leases (5 a grant) in the Worker: never over; under by at most one isolate x 5', async () => {
  const a = await hammer('leased', `do-lease-${Date.now()}`, 64, 2500);
  console.log(`[durable object, leases] decisions=${a.decisions} admitted=${a.admitted} ideal∈[${a.idealMin.toFixed(2)}, ${a.idealMax.toFixed(2)}] reasons=${JSON.stringify([...a.reasons])}`);
  expect(a.errors).toBe(0);
  expect(a.reasons.get('store_error') ?? 0).toBe(0);
  // Demand is about 4x the refill rate here, so the bucket is dry and most answers are local refusals.
  expect(a.reasons.get('lease') ?? 0).toBeGreaterThan(0);
  expect(a.admitted).toBeLessThanOrEqual(Math.floor(a.idealMax));
  expect(a.admitted).toBeGreaterThanOrEqual(Math.floor(a.idealMin - 1 - a.idealMin * 0.005) - 5);
}, 60_000);
