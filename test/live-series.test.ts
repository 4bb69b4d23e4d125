// The live page's time series: 900 one-second slots whatever the traffic or uptime, counts per policy
// and outcome per second (peeks apart), store latency p50/p99 from a log histogram, sampled gauges.
import { describe, expect, it } from 'vitest';
import type { DecisionEvent, LimiterStats } from '../src/limiter.js';
import { CIRCUIT_OPEN } from '../src/limiter/store-call.js';
import { createLiveSeries, SLOTS } from '../functions/app/live-series.js';

const T0 = Date.parse('2026-03-04T05:06:07.000Z');
const S0 = Math.floor(T0 / 1000);

function clocked() {
  let mono = 1_000;
  return {
    wallMs: () => T0,
    monotonicMs: () => mono,
    advance(ms: number) {
      mono += ms;
    },
  };
}

function event(policy: string, outcome: 'allowed' | 'denied' | 'store_error' | 'deny_cache' | 'lease' | 'local', durationMs = 1, extra: Partial<DecisionEvent> = {}): DecisionEvent {
  const allowed = outcome === 'allowed' || (outcome === 'lease' && !extra.key?.startsWith('refused'));
  const reason = outcome === 'allowed' || outcome === 'denied' ? undefined : outcome;
  const decision = reason === 'store_error'
    ? { allowed: false, limit: 1, retryAfterMs: 1000, waitMs: 0, reason }
    : { allowed, limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 0, waitMs: 0, ...(reason ? { reason } : {}) };
  return { policy, key: 'k', cost: 1, op: 'take', decision: decision as DecisionEvent['decision'], durationMs, ...extra };
}

const STATS: LimiterStats = { pendingStoreCalls: 3, maxPendingStoreCalls: 1024, circuit: 'half-open', leases: { keys: 2, tokens: 7 }, localKeys: 0 };

describe('live series', () => {
  it('counts each second per policy and outcome; peeks are not decisions but their store calls are timed', () => {
    const c = clocked();
    const live = createLiveSeries({ policies: ['a', 'b'], stats: () => STATS, ...c });
    live.onDecision(event('a', 'allowed'));
    live.onDecision(event('a', 'allowed'));
    live.onDecision(event('a', 'denied'));
    live.onDecision({ ...event('a', 'denied'), op: 'peek', cost: 0 });
    c.advance(1000);
    live.onDecision(event('b', 'store_error'));
    live.onDecision(event('b', 'deny_cache', 0));
    live.onDecision(event('b', 'lease', 0));
    live.onDecision(event('b', 'store_error', 0, { error: CIRCUIT_OPEN }));
    live.onDecision(event('b', 'local', 2, { error: new Error('down') })); // a failed store call, then the local bucket
    c.advance(1000);
    const w = live.window();
    expect(w.from).toBe(S0);
    expect(w.now).toBe(S0 + 2);
    expect(w.outcomes).toEqual(['allowed', 'denied', 'store_error', 'deny_cache', 'lease', 'local', 'blocked']);
    expect(w.decisions.a).toEqual({ allowed: [2, 0, 0], denied: [1, 0, 0], store_error: [0, 0, 0], deny_cache: [0, 0, 0], lease: [0, 0, 0], local: [0, 0, 0], blocked: [0, 0, 0] });
    expect(w.decisions.b).toEqual({ allowed: [0, 0, 0], denied: [0, 0, 0], store_error: [0, 2, 0], deny_cache: [0, 1, 0], lease: [0, 1, 0], local: [0, 1, 0], blocked: [0, 0, 0] });
    // Timed: the 4 of the first second (the peek too), 2 of the second (the store error and the local
    // answer after a failed call; not deny cache, lease, open circuit).
    expect(w.window.storeCalls).toBe(6);
    // No sample yet: the gauges are unknown, not zero.
    expect(w.pending).toEqual([null, null, null]);
  });

  it('p50 and p99 per second and over the window, within the histogram\'s 4.4 %', () => {
    const c = clocked();
    const live = createLiveSeries({ policies: ['a'], stats: () => STATS, ...c });
    // Second 0: 1..100 ms. Second 1: nothing. Second 2: 98 calls of 0.05 ms, 2 of 800 ms.
    for (let ms = 1; ms <= 100; ms++) live.onDecision(event('a', 'allowed', ms));
    c.advance(2000);
    for (let i = 0; i < 98; i++) live.onDecision(event('a', 'allowed', 0.05));
    live.onDecision(event('a', 'denied', 800));
    live.onDecision(event('a', 'denied', 800));
    const w = live.window();
    const near = (got: number | null, want: number) => {
      expect(got).not.toBeNull();
      expect(Math.abs(got! - want) / want).toBeLessThanOrEqual(0.045);
    };
    near(w.latency.p50[0]!, 50);
    near(w.latency.p99[0]!, 99);
    expect(w.latency.p50[1]).toBeNull();
    expect(w.latency.p99[1]).toBeNull();
    near(w.latency.p50[2]!, 0.05);
    near(w.latency.p99[2]!, 800);
    expect(w.window.storeCalls).toBe(200);
    // Over both seconds, sorted: 98 x 0.05 ms, then 1..100 ms, then 2 x 800 ms: the 100th is 2 ms, the 198th 100 ms.
    near(w.window.p50, 2);
    near(w.window.p99, 100);
  });

  it('samples limiter.stats() into the current second', () => {
    const c = clocked();
    let stats = STATS;
    const live = createLiveSeries({ policies: ['a'], stats: () => stats, ...c });
    live.sample();
    c.advance(1000);
    c.advance(1000);
    stats = { ...STATS, pendingStoreCalls: 0, circuit: 'open', leases: { keys: 0, tokens: 0 } };
    live.sample();
    const w = live.window();
    expect(w.pending).toEqual([3, null, 0]);
    expect(w.leasedTokens).toEqual([7, null, 0]);
    expect(w.circuit).toEqual(['half-open', null, 'open']);
  });

  it('keeps 900 seconds whatever the uptime: older seconds are gone, not summed into their slot', () => {
    const c = clocked();
    const live = createLiveSeries({ policies: ['a'], stats: () => STATS, ...c });
    // 2,500 seconds with one decision each, and 5 in the very first one.
    for (let i = 0; i < 4; i++) live.onDecision(event('a', 'denied'));
    for (let s = 0; s < 2500; s++) {
      live.onDecision(event('a', 'allowed'));
      c.advance(1000);
    }
    const w = live.window();
    expect(w.now).toBe(S0 + 2500);
    expect(w.from).toBe(S0 + 2500 - SLOTS + 1);
    expect(w.decisions.a!.allowed).toHaveLength(SLOTS);
    // Every second held has its own one decision (the last, current one none yet); the early denials are gone.
    expect(w.decisions.a!.allowed!.slice(0, -1).every((n) => n === 1)).toBe(true);
    expect(w.decisions.a!.allowed!.at(-1)).toBe(0);
    expect(w.decisions.a!.denied!.every((n) => n === 0)).toBe(true);
    expect(w.window.storeCalls).toBe(SLOTS - 1);
  });

  it('since= returns only the seconds from it (clamped to what is held)', () => {
    const c = clocked();
    const live = createLiveSeries({ policies: ['a'], stats: () => STATS, ...c });
    for (let s = 0; s < 10; s++) {
      live.onDecision(event('a', 'allowed'));
      c.advance(1000);
    }
    const w = live.window(S0 + 7);
    expect([w.from, w.now]).toEqual([S0 + 7, S0 + 10]);
    expect(w.decisions.a!.allowed).toEqual([1, 1, 1, 0]);
    expect(live.window(S0 - 100).from).toBe(S0);
    expect(live.window(S0 + 99).from).toBe(S0 + 10);
  });
});
