// Prometheus metrics of the Node server, fed by onDecision: after a known mix of decisions the
// counters and the histogram count match it exactly.
import { describe, expect, it } from 'vitest';
import { createLimiter, memoryStore, type Store } from '../src/index.js';
import { createMetrics } from '../functions/app/metrics.js';
import { sample } from './support/prometheus.js';

describe('metrics', () => {
  it('count every outcome per policy and op, and time every decision that called the store', async () => {
    const inner = memoryStore();
    let failing = false;
    const store: Store = {
      name: 'flaky',
      step: async (k, a) => {
        if (failing) throw new Error('down');
        return inner.step(k, a);
      },
      reset: (k) => inner.reset(k),
      ping: async () => {},
    };
    const metrics = createMetrics({ store: 'flaky', defaultMetrics: false });
    const limiter = createLimiter({
      store,
      denyCache: true,
      circuitBreaker: { failureThreshold: 2, cooldownMs: 60_000 },
      onDecision: metrics.onDecision,
      policies: { p: { capacity: 3, refillPerSecond: 0.001 }, q: { capacity: 1, refillPerSecond: 1, onStoreError: 'allow' } },
    });
    for (let i = 0; i < 3; i++) await limiter.take('p', 'k'); // 3 allowed
    await limiter.take('p', 'k'); // denied by the store
    await limiter.take('p', 'k'); // denied from the deny cache
    await limiter.take('p', 'k'); // deny cache again
    await limiter.peek('p', 'k'); // a peek: denied (empty)
    await limiter.acquire('q', 'a'); // acquire, allowed
    failing = true;
    for (let i = 0; i < 4; i++) await limiter.take('q', 'b'); // 2 store errors, then 2 with the circuit open
    const text = await metrics.registry.metrics();
    const d = (policy: string, op: string, outcome: string) => sample(text, `edge_limiter_decisions_total{policy="${policy}",op="${op}",outcome="${outcome}"}`);
    expect(d('p', 'take', 'allowed')).toBe(3);
    expect(d('p', 'take', 'denied')).toBe(1);
    expect(d('p', 'take', 'deny_cache')).toBe(2);
    expect(d('p', 'peek', 'denied')).toBe(1);
    expect(d('q', 'acquire', 'allowed')).toBe(1);
    expect(d('q', 'take', 'store_error')).toBe(4);
    // Store calls: 3 + 1 + peek 1 + acquire 1 + 2 failed = 8 (not the 2 deny-cache or the 2 circuit-open answers).
    expect(sample(text, 'edge_limiter_store_duration_seconds_count{store="flaky"}')).toBe(8);
    expect(sample(text, 'edge_limiter_store_duration_seconds_bucket{le="+Inf",store="flaky"}')).toBe(8);
    expect(text).toContain('# TYPE edge_limiter_store_duration_seconds histogram');
  });
});
