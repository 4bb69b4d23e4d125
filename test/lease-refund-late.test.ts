// Lease refunds that reach the store late: queued behind others on close(), or sent while a refusal was
// in flight. A refund is what the bucket has not refilled since its grant, reckoned when the store
// applies it (StepArgs.refundSinceUs), so a late one never makes a bucket fuller than the lease bound
// allows; and a refusal decided before a refund landed is never kept in the deny cache after it.
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { createLimiter, memoryStore, type Store } from '../src/index.js';

const T0 = 1_790_000_000_000;
const sinceStart = () => Date.now() - T0;

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date', 'setImmediate'] });
  vi.setSystemTime(T0);
});
afterEach(() => vi.useRealTimers());

/** A memory store `oneWayMs` away: the step runs on arrival, its answer comes back as long after. */
function distant(inner: ReturnType<typeof memoryStore>, oneWayMs: number): Store {
  return {
    name: 'distant',
    step: (k, a) =>
      new Promise((resolve) =>
        setTimeout(() => {
          const r = inner.stepSync(k, a);
          setTimeout(() => resolve(r), oneWayMs);
        }, oneWayMs),
      ),
    reset: (k) => inner.reset(k),
    ping: async () => {},
  };
}

it('close() with 2,000 leased keys 20 ms from the store: refunds applied seconds later never exceed capacity + rate × (T + U) in any window', { timeout: 60_000 }, async () => {
  // U = min(maxAgeMs, tokens / rate) = 100 ms.
  const policy = { capacity: 100, refillPerSecond: 100, lease: { tokens: 100, maxAgeMs: 100 } };
  const inner = memoryStore({ nowMs: () => Date.now() });
  const a = createLimiter({ store: distant(inner, 20), policies: { p: policy }, monotonicMs: () => Date.now(), timeoutMs: 60_000, circuitBreaker: false, maxPendingStoreCalls: 100_000 });
  const b = createLimiter({ store: inner, policies: { p: policy }, monotonicMs: () => Date.now() });
  const keys = Array.from({ length: 2000 }, (_, i) => `k${i}`);
  // Each key: a plain take (the key is seen), then a take answered by a grant of 100: A holds 99 of each.
  for (let round = 0; round < 2; round++) {
    const pending = keys.map((k) => a.take('p', k));
    await vi.advanceTimersByTimeAsync(50);
    await Promise.all(pending);
  }
  expect(a.stats().leases).toEqual({ keys: 2000, tokens: 2000 * 99 });
  // 2,000 refunds, 32 at a time, 40 ms a round trip: the last ones reach the store about 2.5 s later.
  const closing = a.close();
  const last = keys.at(-1)!;
  // B drains the last key every ms around the time its refund lands.
  const admitted: { atMs: number; n: number }[] = [];
  while (sinceStart() < 4000) {
    await vi.advanceTimersByTimeAsync(1);
    if (sinceStart() < 2000) continue;
    let n = 0;
    while ((await b.take('p', last)).allowed) n++;
    if (n > 0) admitted.push({ atMs: sinceStart(), n });
  }
  await closing;
  expect(admitted.length).toBeGreaterThan(100);
  // Every window [from, to] of B's admissions, against the bound with T = to - from (store and B share
  // one clock) and U = 100 ms: 100 + 100 × (T + 0.1 s).
  let worst = { admitted: 0, bound: 0, excess: -Infinity };
  for (let i = 0; i < admitted.length; i++) {
    let sum = 0;
    for (let j = i; j < admitted.length; j++) {
      sum += admitted[j]!.n;
      const bound = 100 + (100 * (admitted[j]!.atMs - admitted[i]!.atMs + 100)) / 1000;
      if (sum - bound > worst.excess) worst = { admitted: sum, bound, excess: sum - bound };
    }
  }
  expect(worst.excess, `${worst.admitted} admitted in a window whose bound is ${worst.bound}`).toBeLessThanOrEqual(0);
});

it('the deny cache keeps no refusal decided before this node\'s refund landed', async () => {
  const inner = memoryStore({ nowMs: () => Date.now() });
  const limiter = createLimiter({
    store: distant(inner, 5),
    denyCache: true,
    monotonicMs: () => Date.now(),
    // No refill to speak of: every count below is exact.
    policies: { p: { capacity: 20, refillPerSecond: 0.001, lease: { tokens: 10, maxAgeMs: 100 } } },
  });
  const take = async (cost: number) => {
    const p = limiter.take('p', 'k', { cost });
    await vi.advanceTimersByTimeAsync(11);
    return p;
  };
  expect((await take(1)).allowed).toBe(true); // plain: 19 left in the store
  expect((await take(1)).allowed).toBe(true); // a grant of 10 (started at +11 ms), 1 used: 9 left in the store
  // A cost-12 take sent just before the grant ages out (+111 ms) reaches the store before the refund of 9
  // does: the store refuses it (9 < 12), and that answer comes back after the refund was queued.
  while (sinceStart() < 109) await vi.advanceTimersByTimeAsync(1);
  const during = limiter.take('p', 'k', { cost: 12 });
  await vi.advanceTimersByTimeAsync(60);
  expect(await during).toMatchObject({ allowed: false });
  expect(limiter.stats().leases.tokens).toBe(0);
  // The refund landed: the store holds 18 tokens, and the next cost-12 take goes to the store.
  expect(await take(12)).toMatchObject({ allowed: true, remaining: 6 });
});
