// Who is being limited: createDecisionStats fed by a real limiter's onDecision counts every outcome per
// policy and keeps the keys refused most often, as the limiter saw them (a header key's SHA-256, an
// IPv6 client's /64); topKeys 0 keeps no key at all.
import { describe, expect, it } from 'vitest';
import { Hono } from 'hono';
import { createLimiter, memoryStore, type Decision, type Store } from '../src/index.js';
import { createDecisionStats } from '../src/limiter/decision-stats.js';
import { headerKey, ipKey } from '../src/http/key.js';
import { rateLimit } from '../src/http/middleware.js';

function flakyStore() {
  const inner = memoryStore();
  const state = { failing: false };
  const store: Store = {
    name: 'flaky',
    step: async (k, a) => {
      if (state.failing) throw new Error('down');
      return inner.step(k, a);
    },
    reset: (k) => inner.reset(k),
    ping: async () => {},
  };
  return { store, state };
}

describe('decision stats', () => {
  it('count every outcome per policy, peeks apart, and rank the refused keys with first and last seen', async () => {
    let now = Date.parse('2026-01-02T03:04:05.000Z');
    const stats = createDecisionStats({ topKeys: 10, policies: ['p', 'q', 'idle'], nowMs: () => now });
    const { store, state } = flakyStore();
    const limiter = createLimiter({
      store,
      denyCache: true,
      circuitBreaker: { failureThreshold: 2, cooldownMs: 60_000 },
      onDecision: stats.onDecision,
      policies: { p: { capacity: 2, refillPerSecond: 0.001 }, q: { capacity: 1, refillPerSecond: 1, onStoreError: 'deny' }, idle: { capacity: 1, refillPerSecond: 1 } },
    });
    await limiter.take('p', 'alice'); // allowed
    await limiter.take('p', 'alice'); // allowed
    now += 1000;
    await limiter.take('p', 'alice'); // denied by the store
    now += 1000;
    await limiter.take('p', 'alice'); // denied from the deny cache
    await limiter.take('p', 'bob'); // allowed
    await limiter.take('p', 'bob'); // allowed
    await limiter.take('p', 'bob'); // denied
    await limiter.peek('p', 'carol'); // a peek: counted apart, refuses nothing
    await limiter.acquire('q', 'dave'); // allowed
    state.failing = true;
    for (let i = 0; i < 3; i++) await limiter.take('q', 'erin'); // store errors (the last with the circuit open), refused by the fail mode

    const snap = stats.snapshot();
    expect(snap.topKeys).toBe(10);
    expect(snap.since).toBe('2026-01-02T03:04:05.000Z');
    expect(snap.policies.p).toEqual({
      decisions: { allowed: 4, denied: 2, store_error: 0, deny_cache: 1, lease: 0, local: 0, blocked: 0 },
      peeks: 1,
      refused: 3,
      topRefused: [
        { key: 'alice', count: 2, error: 0, firstSeen: '2026-01-02T03:04:06.000Z', lastSeen: '2026-01-02T03:04:07.000Z' },
        { key: 'bob', count: 1, error: 0, firstSeen: '2026-01-02T03:04:07.000Z', lastSeen: '2026-01-02T03:04:07.000Z' },
      ],
    });
    // Refusals by the fail mode say nothing about the key: counted as store_error, not ranked.
    expect(snap.policies.q).toEqual({ decisions: { allowed: 1, denied: 0, store_error: 3, deny_cache: 0, lease: 0, local: 0, blocked: 0 }, peeks: 0, refused: 0, topRefused: [] });
    expect(snap.policies.idle).toEqual({ decisions: { allowed: 0, denied: 0, store_error: 0, deny_cache: 0, lease: 0, local: 0, blocked: 0 }, peeks: 0, refused: 0, topRefused: [] });
    // `limit` caps the keys listed.
    expect(stats.snapshot(1).policies.p!.topRefused.map((e) => e.key)).toEqual(['alice']);
  });

  it('count answers from a token lease, allowed and refused, under lease', async () => {
    const stats = createDecisionStats();
    const limiter = createLimiter({
      store: memoryStore(),
      onDecision: stats.onDecision,
      policies: { hot: { capacity: 4, refillPerSecond: 0.001, lease: { tokens: 2, maxAgeMs: 60_000 } } },
    });
    const decisions: Decision[] = [];
    for (let i = 0; i < 6; i++) decisions.push(await limiter.take('hot', 'k'));
    const byReason = (r: string | undefined, allowed: boolean) => decisions.filter((d) => d.reason === r && d.allowed === allowed).length;
    const snap = stats.snapshot().policies.hot!;
    // Whatever split the lease makes, each decision is counted once under its own outcome.
    expect(snap.decisions.lease).toBe(byReason('lease', true) + byReason('lease', false));
    expect(snap.decisions.lease).toBeGreaterThan(0);
    expect(snap.decisions.allowed).toBe(byReason(undefined, true));
    expect(snap.decisions.denied).toBe(byReason(undefined, false));
    expect(Object.values(snap.decisions).reduce((a, b) => a + b, 0)).toBe(6);
    const refusals = decisions.filter((d) => !d.allowed).length;
    expect(refusals).toBeGreaterThan(0);
    expect(snap.refused).toBe(refusals);
    expect(snap.topRefused).toMatchObject([{ key: 'k', count: refusals }]);
  });

  it('record keys as the limiter saw them: the SHA-256 of a header key, the /64 of an IPv6 client', async () => {
    const stats = createDecisionStats();
    const limiter = createLimiter({ store: memoryStore(), onDecision: stats.onDecision, policies: { byKey: { capacity: 1, refillPerSecond: 0.001 }, byIp: { capacity: 1, refillPerSecond: 0.001 } } });
    const app = new Hono();
    app.get('/key', rateLimit({ limiter, policy: 'byKey', key: headerKey('x-api-key') }), (c) => c.text('ok'));
    app.get('/ip', rateLimit({ limiter, policy: 'byIp', key: ipKey() }), (c) => c.text('ok'));
    const secret = 'sk-live-do-not-log-me';
    for (let i = 0; i < 2; i++) await app.request('/key', { headers: { 'x-api-key': secret } });
    // Two addresses of one /64: one bucket, so the second is refused.
    for (const addr of ['2001:db8:aa:bb:1::1', '2001:db8:aa:bb:ffff::2']) await app.request('/ip', {}, { incoming: { socket: { remoteAddress: addr } } });
    const snap = stats.snapshot();
    const digest = Buffer.from(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(secret))).toString('base64url');
    expect(snap.policies.byKey!.topRefused.map((e) => e.key)).toEqual([digest]);
    expect(snap.policies.byIp!.topRefused.map((e) => e.key)).toEqual(['2001:db8:aa:bb::/64']);
    expect(JSON.stringify(snap)).not.toContain(secret);
  });

  it('topKeys 0 keeps no key, only the counters', async () => {
    const stats = createDecisionStats({ topKeys: 0 });
    const limiter = createLimiter({ store: memoryStore(), onDecision: stats.onDecision, policies: { p: { capacity: 1, refillPerSecond: 0.001 } } });
    for (let i = 0; i < 50; i++) {
      await limiter.take('p', `secret-key-${i}`);
      await limiter.take('p', `secret-key-${i}`);
    }
    const snap = stats.snapshot();
    expect(snap.topKeys).toBe(0);
    expect(snap.policies.p).toEqual({ decisions: { allowed: 50, denied: 50, store_error: 0, deny_cache: 0, lease: 0, local: 0, blocked: 0 }, peeks: 0, refused: 50, topRefused: [] });
    expect(JSON.stringify(snap)).not.toContain('secret-key');
  });

  it('refuses a topKeys that is not an integer from 0 to 10000', () => {
    for (const bad of [-1, 1.5, 10_001, Number.NaN]) expect(() => createDecisionStats({ topKeys: bad })).toThrow(/topKeys must be an integer from 0 to 10000/);
  });
});
