// Prometheus metrics of the Node server, fed by onDecision: after a known mix of decisions the
// counters and the histogram count match it exactly; a reservation is op="acquire" and a peek is
// never a denial, through the permit endpoint too; and the metrics table of docs/operating.md names exactly the
// metrics, types and label values /metrics serves.
import { describe, expect, it } from 'vitest';
import { createLimiter, memoryStore, type Store } from '../src/index.js';
import { permitApp } from '../src/http/permit-app.js';
import { checked } from './support/openapi-contract.js';
import { createMetrics } from '../functions/app/metrics.js';
import { sample } from './support/prometheus.js';
import { recordStore } from './support/record-store.js';
import { metricsTable } from './support/guides.js';

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
    await limiter.peek('p', 'k'); // a peek on the empty bucket: read, not a denial
    await limiter.acquire('q', 'a'); // acquire, allowed
    const reserved = await limiter.take('q', 'a', { maxWaitMs: 5000 }); // a take answered with a wait: a reservation
    expect(reserved.waitMs).toBeGreaterThan(0);
    await limiter.take('q', 'c', { maxWaitMs: 5000 }); // a take that allowed a wait but needed none: a take
    await limiter.take('q', 'charged', { idempotencyKey: 'job' }); // a take, allowed
    await limiter.settle('q', 'charged', { charge: 'job', cost: 0 }); // a settlement: applied, never an admission
    failing = true;
    for (let i = 0; i < 4; i++) await limiter.take('q', 'b'); // 2 store errors, then 2 with the circuit open
    const text = await metrics.registry.metrics();
    const d = (policy: string, op: string, outcome: string) => sample(text, `edge_limiter_decisions_total{policy="${policy}",op="${op}",outcome="${outcome}"}`);
    expect(d('p', 'take', 'allowed')).toBe(3);
    expect(d('p', 'take', 'denied')).toBe(1);
    expect(d('p', 'take', 'deny_cache')).toBe(2);
    expect(d('p', 'peek', 'read')).toBe(1);
    expect(d('p', 'peek', 'denied')).toBeUndefined();
    expect(d('q', 'acquire', 'allowed')).toBe(2);
    expect(d('q', 'take', 'allowed')).toBe(2);
    expect(d('q', 'settle', 'applied')).toBe(1);
    expect(d('q', 'settle', 'allowed')).toBeUndefined();
    expect(d('q', 'take', 'store_error')).toBe(4);
    // Store calls: 3 + 1 + peek 1 + acquire 1 + 2 takes with maxWaitMs + a keyed take and its settlement
    // 2 + 2 failed = 12 (not the 2 deny-cache or the 2 circuit-open answers).
    expect(sample(text, 'edge_limiter_store_duration_seconds_count{store="flaky"}')).toBe(12);
    expect(sample(text, 'edge_limiter_store_duration_seconds_bucket{le="+Inf",store="flaky"}')).toBe(12);
    expect(text).toContain('# TYPE edge_limiter_store_duration_seconds histogram');
  });

  it('a settlement and an adjustment on a blocked key are applied (outcome="applied"), its takes blocked', async () => {
    const metrics = createMetrics({ store: 'memory', defaultMetrics: false });
    const limiter = createLimiter({ store: memoryStore(), onDecision: metrics.onDecision, policies: { p: { capacity: 10, refillPerSecond: 0.001 } } });
    await limiter.take('p', 'k', { idempotencyKey: 'job' });
    await limiter.block('p', 'k', { forMs: 60_000 });
    expect((await limiter.settle('p', 'k', { charge: 'job', cost: 3 })).reason).toBe('blocked');
    expect((await limiter.adjust('p', 'k', -1)).reason).toBe('blocked');
    expect((await limiter.take('p', 'k')).reason).toBe('blocked');
    const text = await metrics.registry.metrics();
    const d = (op: string, outcome: string) => sample(text, `edge_limiter_decisions_total{policy="p",op="${op}",outcome="${outcome}"}`);
    expect(d('settle', 'applied')).toBe(1);
    expect(d('adjust', 'applied')).toBe(1);
    expect(d('settle', 'blocked')).toBeUndefined();
    expect(d('adjust', 'blocked')).toBeUndefined();
    expect(d('take', 'blocked')).toBe(1);
  });

  it('through the permit endpoint: a 200 with a wait is op="acquire", a read of an empty bucket is op="peek" outcome="read"', async () => {
    const metrics = createMetrics({ store: 'memory', defaultMetrics: false });
    const limiter = createLimiter({ store: memoryStore(), onDecision: metrics.onDecision, policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    const app = checked(permitApp({ limiter, tokens: ['t'], log: () => {} }));
    const auth = { Authorization: 'Bearer t' };
    const permit = async (maxWaitMs: number) => {
      const res = await app.request('/v1/permits', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify({ policy: 'p', key: 'k', maxWaitMs }) });
      return { status: res.status, ...((await res.json()) as { waitMs: number }) };
    };
    expect(await permit(5000)).toMatchObject({ status: 200, waitMs: 0 }); // the last token, at once
    const reserved = await permit(5000); // the next token, in about a second
    expect(reserved.status).toBe(200);
    expect(reserved.waitMs).toBeGreaterThan(0);
    expect(await permit(0)).toMatchObject({ status: 429 }); // refused: a take, denied
    const read = await app.request('/v1/buckets/p/k', { headers: auth });
    expect(read.status).toBe(200);
    expect(((await read.json()) as { allowed: boolean }).allowed).toBe(false); // the bucket is empty
    const text = await metrics.registry.metrics();
    const d = (op: string, outcome: string) => sample(text, `edge_limiter_decisions_total{policy="p",op="${op}",outcome="${outcome}"}`);
    expect(d('take', 'allowed')).toBe(1);
    expect(d('acquire', 'allowed')).toBe(1);
    expect(d('take', 'denied')).toBe(1);
    expect(d('peek', 'read')).toBe(1);
    expect(d('peek', 'denied')).toBeUndefined();
    expect(text.match(/^edge_limiter_decisions_total\{/gm)).toHaveLength(4);
  });

  it('the metrics table of docs/operating.md names exactly the metrics, types and label values /metrics serves', async () => {
    const rows = metricsTable();
    const listed = (metric: string, label: string) => rows.find((r) => r.metric === metric)?.labels.get(label) ?? [];
    expect(listed('edge_limiter_decisions_total', 'op').length).toBeGreaterThanOrEqual(3);
    expect(listed('edge_limiter_decisions_total', 'outcome').length).toBeGreaterThanOrEqual(5);

    // Every kind of decision, on the metrics functions/node.ts serves (createMetrics with the defaults),
    // over a store that keeps override records (a blocked key's refusals).
    const inner = recordStore();
    let failing = false;
    const store: Store = {
      name: 'memory',
      step: async (k, a, s) => {
        if (failing) throw new Error('down');
        return inner.step(k, a, s);
      },
      reset: (k) => inner.reset(k),
      override: (k, a) => inner.override(k, a),
      ping: async () => {},
    };
    const metrics = createMetrics({ store: store.name });
    const limiter = createLimiter({
      store,
      denyCache: true,
      onDecision: metrics.onDecision,
      policies: {
        p: { capacity: 1, refillPerSecond: 1 },
        l: { capacity: 100, refillPerSecond: 100, lease: { tokens: 10, maxAgeMs: 1000 } },
        f: { capacity: 1, refillPerSecond: 1, onStoreError: 'local' },
      },
    });
    try {
      await limiter.take('p', 'a'); // take, allowed
      await limiter.take('p', 'a'); // take, denied
      await limiter.take('p', 'a'); // take, deny_cache
      await limiter.acquire('p', 'b'); // acquire, allowed
      await limiter.peek('p', 'a'); // peek, read
      await limiter.block('p', 'z', { forMs: 60_000 });
      await limiter.take('p', 'z'); // take, blocked
      await limiter.adjust('p', 'z', -1); // adjust, applied (a block refuses takes only)
      await limiter.settle('p', 'z', { charge: 'job', cost: 0 }); // settle, applied
      let leased = false;
      for (let i = 0; i < 20 && !leased; i++) leased = (await limiter.take('l', 'hot')).reason === 'lease'; // take, lease
      expect(leased).toBe(true);
      failing = true;
      await limiter.take('p', 'c'); // take, store_error
      await limiter.take('f', 'c'); // take, local
    } finally {
      await limiter.close();
    }
    // The permit API's administrative actions (its onAudit).
    metrics.onAudit({ action: 'reset', actor: 'ops', policy: 'p', key: 'a', atMs: Date.now(), after: { remaining: 1 } });
    metrics.onAudit({ action: 'adjust', actor: 'ops', policy: 'p', key: 'a', atMs: Date.now(), after: { cost: -1, remaining: 1 } });
    for (const action of ['limits', 'policy-limits', 'block', 'unblock'] as const) metrics.onAudit({ action, actor: 'ops', policy: 'p', key: 'a', atMs: Date.now() });
    // A failed one was not applied: not counted (its audit line says so).
    metrics.onAudit({ action: 'reset', actor: 'ops', policy: 'p', key: 'a', atMs: Date.now(), error: new Error('down') });
    const text = await metrics.registry.metrics();
    expect(sample(text, 'edge_limiter_admin_actions_total{action="reset",token="ops"}')).toBe(1);

    // Metric families and types: each served family is a row of the table, and each row is served.
    const served = new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
    const rowOf = (family: string) => rows.find((r) => (r.metric.endsWith('*') ? family.startsWith(r.metric.slice(0, -1)) : family === r.metric));
    for (const family of served.keys()) expect(rowOf(family), `/metrics serves ${family}, docs/operating.md does not name it`).toBeDefined();
    for (const r of rows) {
      const families = [...served.keys()].filter((f) => rowOf(f) === r);
      expect(families.length, `docs/operating.md names ${r.metric}, /metrics serves no such metric`).toBeGreaterThan(0);
      if (r.type) expect(served.get(r.metric), `${r.metric}'s type`).toBe(r.type);
    }

    // Label values: each value the table lists is served, and each served value is listed.
    for (const r of rows) {
      for (const [label, values] of r.labels) {
        const seen = new Set([...text.matchAll(new RegExp(`^${r.metric}(?:_bucket|_sum|_count)?\\{[^}]*\\b${label}="([^"]*)"`, 'gm'))].map((m) => m[1]!));
        expect(seen.size, `${r.metric} has no ${label} label`).toBeGreaterThan(0);
        if (values.length === 0) continue; // free-form: the policy's or the store's name
        expect([...seen].sort(), `${r.metric} ${label}: served vs docs/operating.md`).toEqual([...values].sort());
      }
    }
  });
});
