// The onAudit hook: one event per administrative action (reset, free-form adjust) through the library,
// naming the actor the call passed, with no event for decisions; a throwing hook changes nothing.
import { describe, expect, it } from 'vitest';
import { createLimiter, memoryStore, StoreError, type AuditEvent, type Store } from '../src/index.js';

const policies = { api: { capacity: 5, refill: '1/hour' } } as const;

describe('onAudit', () => {
  it('hears every reset and free-form adjustment, with actor, cost and the bucket before and after, and nothing else', async () => {
    const events: AuditEvent[] = [];
    let peeks = 0;
    const limiter = createLimiter({ store: memoryStore(), policies, onAudit: (e) => events.push(e), onDecision: (e) => void (e.op === 'peek' && peeks++) });
    const before = Date.now();
    await limiter.take('api', 'u1', { cost: 3 });
    await limiter.peek('api', 'u1');
    await limiter.adjust('api', 'u1', -1, { actor: 'ops-team' });
    await limiter.adjust('api', 'u1', 2, { idempotencyKey: 'adj-1' });
    await limiter.adjust('api', 'u1', 2, { idempotencyKey: 'adj-1', actor: 'ops-team' });
    await limiter.reset('api', 'u1', { actor: 'admin' });
    expect(events.map(({ atMs, ...rest }) => rest)).toEqual([
      { action: 'adjust', policy: 'api', key: 'u1', actor: 'ops-team', before: { remaining: 2 }, after: { cost: -1, remaining: 3 } },
      { action: 'adjust', policy: 'api', key: 'u1', before: { remaining: 3 }, after: { cost: 2, remaining: 1 } },
      { action: 'adjust', policy: 'api', key: 'u1', actor: 'ops-team', before: { remaining: 1 }, after: { cost: 2, remaining: 1, repeated: true } },
      { action: 'reset', policy: 'api', key: 'u1', actor: 'admin', before: { remaining: 1 }, after: { remaining: 5 } },
    ]);
    // The peek that reads `before` is the audit's, not a decision: onDecision hears only the caller's one.
    expect(peeks).toBe(1);
    for (const e of events) expect(e.atMs).toBeGreaterThanOrEqual(before);
    for (const e of events) expect(e.atMs).toBeLessThanOrEqual(Date.now());
  });

  it('reports a failed action with its error, and a hook that throws changes nothing', async () => {
    const inner = memoryStore();
    let down = false;
    const store: Store = {
      name: 'flaky',
      step: (key, args) => (down ? Promise.reject(new Error('ECONNREFUSED')) : inner.step(key, args)),
      reset: (key) => (down ? Promise.reject(new Error('ECONNREFUSED')) : inner.reset(key)),
      ping: async () => {},
    };
    const events: AuditEvent[] = [];
    const limiter = createLimiter({
      store,
      policies,
      circuitBreaker: false,
      onAudit: (e) => {
        events.push(e);
        throw new Error('the log is full');
      },
    });
    await expect(limiter.adjust('api', 'k', 2, { actor: 'a' })).resolves.toMatchObject({ remaining: 3 });
    await expect(limiter.reset('api', 'k')).resolves.toBeUndefined();
    down = true;
    await expect(limiter.adjust('api', 'k', 1)).rejects.toBeInstanceOf(StoreError);
    await expect(limiter.reset('api', 'k', { actor: 'b' })).rejects.toThrow('ECONNREFUSED');
    expect(events.map((e) => [e.action, e.actor, e.error === undefined ? 'ok' : 'failed'])).toEqual([
      ['adjust', 'a', 'ok'],
      ['reset', undefined, 'ok'],
      ['adjust', undefined, 'failed'],
      ['reset', 'b', 'failed'],
    ]);
    // With the store down, the peek before the action has no answer either: no `before`.
    expect(events.map((e) => e.before)).toEqual([{ remaining: 5 }, { remaining: 3 }, undefined, undefined]);
    // Input refused before the store is no action: no event.
    await expect(limiter.adjust('api', '', 1)).rejects.toThrow();
    expect(events).toHaveLength(4);
  });
});
