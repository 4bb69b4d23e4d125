// Runtime limits through the limiter (issue 31): setLimits/getLimits/clearLimits, block/unblock and the
// policy-wide change, on a store that keeps override records (test/support/record-store.ts: the pure
// core over a Map, on a clock the test sets). Decisions are made under the numbers in force and say so;
// each change is one audit event; bad input is an InvalidInputError naming the field.
import { describe, expect, it } from 'vitest';
import { createLimiter, InvalidInputError, memoryStore, StoreError, type AuditEvent, type Limiter, type LimiterOptions, type Store } from '../src/index.js';
import { rateLimitHeaders } from '../src/http/headers.js';
import { recordStore, type RecordStore } from './support/record-store.js';
import { switchableStore } from './support/switchable-store.js';

const SLOW = 1 / 3600; // one token an hour: nothing refills within a test

function limiterOn(store: RecordStore, extra: Partial<LimiterOptions> = {}, clock = { ms: 0 }) {
  const audits: AuditEvent[] = [];
  const limiter = createLimiter({
    store,
    policies: {
      api: { capacity: 2, refillPerSecond: SLOW },
      big: { capacity: 100, refillPerSecond: SLOW },
      two: { limits: { second: { capacity: 5, refillPerSecond: 5 }, day: { capacity: 100, refill: '100/day' } } },
      fast: { capacity: 2, refillPerSecond: 100 },
    },
    monotonicMs: () => clock.ms,
    onAudit: (e) => audits.push(e),
    ...extra,
  });
  return { limiter, audits, clock };
}

async function takes(l: ReturnType<typeof limiterOn>['limiter'], policy: 'api' | 'big' | 'two' | 'fast', key: string, n: number): Promise<number> {
  let allowed = 0;
  for (let i = 0; i < n; i++) if ((await l.take(policy, key)).allowed) allowed++;
  return allowed;
}

describe('setLimits: a key\'s own numbers, in the same atomic step as its bucket', () => {
  it('raised mid-debt: the tokens spent stay spent and the headroom is gained; the decision says which numbers', async () => {
    const store = recordStore();
    const { limiter, audits } = limiterOn(store);
    expect(await takes(limiter, 'api', 'k', 3)).toBe(2);
    const set = await limiter.setLimits('api', 'k', { capacity: 5, refillPerSecond: SLOW }, { actor: 'ops' });
    expect(set).toMatchObject({ policy: 'api', key: 'k', source: 'key', limits: [{ name: 'api', capacity: 5 }], previous: { source: 'policy', limits: [{ capacity: 2 }] } });
    const d = await limiter.take('api', 'k');
    expect(d).toMatchObject({ allowed: true, limit: 5, remaining: 2 });
    expect(d.limitsInForce).toEqual([{ name: 'api', capacity: 5, refillPerSecond: expect.closeTo(SLOW, 12) }]);
    expect(rateLimitHeaders(limiter.policy('api')!, d)['RateLimit-Policy']).toBe('"api";q=5;w=18000');
    expect(await takes(limiter, 'api', 'k', 5)).toBe(2);
    // Another key of the policy keeps the policy's numbers.
    const other = await limiter.take('api', 'other');
    expect(other.limit).toBe(2);
    expect(other.limitsInForce).toBeUndefined();
    expect(audits).toEqual([expect.objectContaining({ action: 'limits', policy: 'api', key: 'k', actor: 'ops', before: { limits: [expect.objectContaining({ capacity: 2 })], source: 'policy' }, after: expect.objectContaining({ source: 'key' }) })]);
  });

  it('lowered mid-debt: 90 spent of 100 moved to a capacity of 50 leaves 0', async () => {
    const store = recordStore();
    const { limiter } = limiterOn(store);
    expect(await takes(limiter, 'big', 'k', 90)).toBe(90);
    await limiter.setLimits('big', 'k', { capacity: 50, refillPerSecond: SLOW });
    // The 90 stay spent: the next token once 41 of them have refilled, at one an hour.
    expect(await limiter.take('big', 'k')).toMatchObject({ allowed: false, limit: 50, remaining: 0, retryAfterMs: 41 * 3_600_000 });
    expect((await limiter.peek('big', 'k')).limit).toBe(50);
  });

  it('clearLimits carries the bucket back; getLimits reads without changing', async () => {
    const store = recordStore();
    const { limiter } = limiterOn(store);
    await limiter.setLimits('api', 'k', { capacity: 10, refill: '10/hour' });
    expect(await takes(limiter, 'api', 'k', 4)).toBe(4);
    expect(await limiter.getLimits('api', 'k')).toEqual({ policy: 'api', key: 'k', source: 'key', limits: [{ name: 'api', capacity: 10, refillPerSecond: expect.closeTo(10 / 3600, 12) }] });
    const cleared = await limiter.clearLimits('api', 'k');
    expect(cleared).toMatchObject({ source: 'policy', limits: [{ capacity: 2 }], previous: { source: 'key' } });
    // 4 spent, carried whole to a capacity of 2: empty, and the next token once 3 have refilled, at one an hour.
    expect(await limiter.take('api', 'k')).toMatchObject({ allowed: false, limit: 2, retryAfterMs: 3 * 3_600_000 });
  });

  it('expires: after expiresInMs of the store\'s clock the policy\'s numbers decide again', async () => {
    const store = recordStore();
    const { limiter } = limiterOn(store);
    const set = await limiter.setLimits('api', 'k', { capacity: 5, refillPerSecond: SLOW }, { expiresInMs: 60_000 });
    expect(set.expiresInMs).toBe(60_000);
    expect(await takes(limiter, 'api', 'k', 5)).toBe(5);
    store.nowUs += 59_999_000;
    expect((await limiter.getLimits('api', 'k')).expiresInMs).toBe(1);
    store.nowUs += 1000;
    expect(await limiter.getLimits('api', 'k')).toMatchObject({ source: 'policy' });
    const d = await limiter.take('api', 'k');
    expect(d).toMatchObject({ allowed: false, limit: 2 });
    expect(d.limitsInForce).toBeUndefined();
  });

  it('one limit of a policy with several: the others keep the policy\'s numbers', async () => {
    const store = recordStore();
    const { limiter } = limiterOn(store);
    const set = await limiter.setLimits('two', 'k', { limits: { day: { capacity: 1000, refill: '1000/day' } } });
    expect(set.limits).toEqual([
      { name: 'second', capacity: 5, refillPerSecond: 5 },
      { name: 'day', capacity: 1000, refillPerSecond: expect.closeTo(1000 / 86400, 12) },
    ]);
    const d = await limiter.take('two', 'k');
    expect(d.limits?.map((l) => l.limit)).toEqual([5, 1000]);
    expect(rateLimitHeaders(limiter.policy('two')!, d)['RateLimit-Policy']).toBe('"two.second";q=5;w=1, "two.day";q=1000;w=86400');
  });

  it('is validated like a policy: an InvalidInputError names the field, and nothing reaches the store', async () => {
    const store = recordStore();
    const { limiter, audits } = limiterOn(store);
    const field = async (p: Promise<unknown>) => {
      const err = await p.then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidInputError);
      return (err as InvalidInputError).field;
    };
    expect(await field(limiter.setLimits('api', 'k', { capacity: 0, refillPerSecond: 1 }))).toBe('capacity');
    expect(await field(limiter.setLimits('api', 'k', { capacity: 1.5, refillPerSecond: 1 }))).toBe('capacity');
    expect(await field(limiter.setLimits('api', 'k', { capacity: 5, refillPerSecond: 0 }))).toBe('refillPerSecond');
    expect(await field(limiter.setLimits('api', 'k', { capacity: 5, refill: '5/fortnight' as never }))).toBe('refill');
    expect(await field(limiter.setLimits('api', 'k', { capacity: 5, refillPerSecond: 1, shadow: true } as never))).toBe('shadow');
    expect(await field(limiter.setLimits('api', 'k', { limits: { api: { capacity: 5, refillPerSecond: 1 } } }))).toBe('limits');
    expect(await field(limiter.setLimits('two', 'k', { capacity: 5, refillPerSecond: 1 }))).toBe('limits');
    expect(await field(limiter.setLimits('two', 'k', { limits: { week: { capacity: 5, refillPerSecond: 1 } } }))).toBe('limits.week');
    expect(await field(limiter.setLimits('two', 'k', { limits: { day: { capacity: -1, refillPerSecond: 1 } } }))).toBe('limits.day.capacity');
    expect(await field(limiter.setLimits('api', 'k', { capacity: 5, refillPerSecond: 1 }, { expiresInMs: 0 }))).toBe('expiresInMs');
    expect(await field(limiter.block('api', 'k', { forMs: 1.5 }))).toBe('forMs');
    expect(await field(limiter.setLimits('api', '', { capacity: 5, refillPerSecond: 1 }))).toBe('key');
    expect(store.calls.override).toBe(0);
    expect(audits).toEqual([]);
  });
});

describe('a change of numbers gives back nothing spent (the debt is carried whole, never cut to a lower capacity)', () => {
  const stores: Record<string, () => { store: Store; advanceMs(ms: number): void }> = {
    'the pure core (record store)': () => {
      const store = recordStore();
      return { store, advanceMs: (ms) => void (store.nowUs += ms * 1000) };
    },
    'the memory store': () => {
      let nowMs = 1_000_000;
      return { store: memoryStore({ nowMs: () => nowMs }), advanceMs: (ms) => void (nowMs += ms) };
    },
  };
  const policies = { ten: { capacity: 10, refillPerSecond: SLOW }, big: { capacity: 100, refillPerSecond: SLOW } };
  const count = async (l: Limiter<'ten' | 'big'>, policy: 'ten' | 'big', key: string, n: number) => {
    let allowed = 0;
    for (let i = 0; i < n; i++) if ((await l.take(policy, key)).allowed) allowed++;
    return allowed;
  };

  for (const [name, make] of Object.entries(stores)) {
    describe(name, () => {
      it('lowered then cleared at the same instant: capacity 10 spent, set to 1 and cleared, admits nothing more', async () => {
        const { store } = make();
        const limiter = createLimiter({ store, policies });
        expect(await count(limiter, 'ten', 'k', 10)).toBe(10);
        await limiter.setLimits('ten', 'k', { capacity: 1, refillPerSecond: SLOW });
        expect(await limiter.clearLimits('ten', 'k')).toMatchObject({ source: 'policy', limits: [{ capacity: 10 }] });
        expect(await count(limiter, 'ten', 'k', 20)).toBe(0);
        // Still 10 spent: the next token is an hour away, as before the change.
        expect(await limiter.take('ten', 'k')).toMatchObject({ allowed: false, limit: 10, remaining: 0, retryAfterMs: 3_600_000 });
      });

      it('a temporary restriction (capacity 1 for 1 s) on a spent key ends with the key as spent as it was, less the refill', async () => {
        const { store, advanceMs } = make();
        const limiter = createLimiter({ store, policies });
        expect(await count(limiter, 'ten', 'k', 10)).toBe(10);
        await limiter.setLimits('ten', 'k', { capacity: 1, refillPerSecond: SLOW }, { expiresInMs: 1000 });
        expect(await count(limiter, 'ten', 'k', 5)).toBe(0);
        advanceMs(1000);
        expect(await limiter.getLimits('ten', 'k')).toMatchObject({ source: 'policy', limits: [{ capacity: 10 }] });
        expect(await count(limiter, 'ten', 'k', 20)).toBe(0);
        // 1 s of refill at one an hour: the next token 3599 s away.
        expect(await limiter.take('ten', 'k')).toMatchObject({ allowed: false, limit: 10, retryAfterMs: 3_599_000 });
        advanceMs(3_598_999);
        expect((await limiter.take('ten', 'k')).allowed).toBe(false);
        advanceMs(1);
        expect(await limiter.take('ten', 'k')).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
      });

      it('90 spent of 100 moved to 50 (at 1/s): 0 left, and the next token exactly when the debt has refilled below 50 at the new rate', async () => {
        const { store, advanceMs } = make();
        const limiter = createLimiter({ store, policies });
        expect(await count(limiter, 'big', 'k', 90)).toBe(90);
        await limiter.setLimits('big', 'k', { capacity: 50, refillPerSecond: 1 });
        // 90 spent, 50 the capacity: 41 tokens must refill first, at 1 a second.
        expect(await limiter.take('big', 'k')).toMatchObject({ allowed: false, limit: 50, remaining: 0, retryAfterMs: 41_000 });
        advanceMs(40_999);
        expect(await limiter.take('big', 'k')).toMatchObject({ allowed: false, limit: 50, remaining: 0, retryAfterMs: 1 });
        advanceMs(1);
        expect(await limiter.take('big', 'k')).toMatchObject({ allowed: true, limit: 50, remaining: 0 });
        expect((await limiter.take('big', 'k')).allowed).toBe(false);
      });
    });
  }
});

describe('block and unblock', () => {
  it('a blocked key is refused whatever its bucket holds, reason blocked, until the block ends; unblock lifts it', async () => {
    const store = recordStore();
    const { limiter, audits } = limiterOn(store);
    const blocked = await limiter.block('api', 'k', { forMs: 30_000, actor: 'ops' });
    expect(blocked).toMatchObject({ blockedForMs: 30_000, source: 'policy' });
    expect(await limiter.take('api', 'k')).toMatchObject({ allowed: false, reason: 'blocked', retryAfterMs: 30_000, remaining: 0 });
    expect(await limiter.take('api', 'other')).toMatchObject({ allowed: true });
    store.nowUs += 10_000_000;
    expect(await limiter.take('api', 'k')).toMatchObject({ allowed: false, reason: 'blocked', retryAfterMs: 20_000 });
    const h = rateLimitHeaders(limiter.policy('api')!, await limiter.take('api', 'k'));
    expect(h).toMatchObject({ 'X-RateLimit-Reason': 'blocked', 'Retry-After': '20' });
    expect((await limiter.unblock('api', 'k')).blockedForMs).toBeUndefined();
    expect(await limiter.take('api', 'k')).toMatchObject({ allowed: true, remaining: 1 });
    expect(audits.map((a) => a.action)).toEqual(['block', 'unblock']);
    expect(audits[0]).toMatchObject({ actor: 'ops', before: { source: 'policy' }, after: { blockedForMs: 30_000 } });
  });

  it('a blocked key with numbers of its own is described by them: limit, limitsInForce and RateLimit-Policy; several limits are named each (review 5, L1)', async () => {
    const store = recordStore();
    const { limiter } = limiterOn(store);
    await limiter.setLimits('api', 'k', { capacity: 1000, refill: '1000/hour' });
    await limiter.block('api', 'k', { forMs: 30_000 });
    for (const d of [await limiter.take('api', 'k'), await limiter.peek('api', 'k')]) {
      expect(d).toMatchObject({ allowed: false, reason: 'blocked', limit: 1000, remaining: 0, retryAfterMs: 30_000 });
      expect(d.limitsInForce).toEqual([{ name: 'api', capacity: 1000, refillPerSecond: expect.closeTo(1000 / 3600, 12) }]);
      expect(rateLimitHeaders(limiter.policy('api')!, d)).toMatchObject({ 'RateLimit-Policy': '"api";q=1000;w=3600', 'X-RateLimit-Limit': '1000', 'X-RateLimit-Reason': 'blocked' });
    }
    await limiter.setLimits('two', 'm', { limits: { day: { capacity: 3, refill: '3/day' } } });
    await limiter.block('two', 'm', { forMs: 60_000 });
    const d = await limiter.take('two', 'm');
    // The most constraining limit's capacity, as an answer that is not blocked gives (review 7, F5).
    expect(d).toMatchObject({ allowed: false, reason: 'blocked', retryAfterMs: 60_000, limit: 3 });
    expect(d.limits?.map((l) => [l.name, l.limit, l.remaining])).toEqual([['second', 5, 0], ['day', 3, 0]]);
    const h = rateLimitHeaders(limiter.policy('two')!, d);
    expect(h['RateLimit-Policy']).toBe('"two.second";q=5;w=1, "two.day";q=3;w=86400');
    expect(h.RateLimit).toBe('"two.second";r=0;t=60, "two.day";r=0;t=60');
    // A blocked key with no numbers of its own: the policy's, each limit named too.
    await limiter.block('two', 'n', { forMs: 60_000 });
    const n = await limiter.take('two', 'n');
    expect(n.limitsInForce).toBeUndefined();
    expect(rateLimitHeaders(limiter.policy('two')!, n).RateLimit).toBe('"two.second";r=0;t=60, "two.day";r=0;t=60');
  });

  it('refuses takes only: a settlement beyond its estimate, a charge and a refund made during it are applied (reason blocked, as a peek answers)', async () => {
    // The memory store: it keeps the charge's record a settlement needs (the record store here does not).
    const limiter = createLimiter({ store: memoryStore(), policies: { big: { capacity: 100, refillPerSecond: SLOW } } });
    expect(await limiter.take('big', 'k', { cost: 2, idempotencyKey: 'work-1' })).toMatchObject({ allowed: true, remaining: 98 });
    await limiter.block('big', 'k', { forMs: 30_000 });
    // The work took 10, not 2: the 8 more are paid although the key is blocked.
    const settled = await limiter.settle('big', 'k', { charge: 'work-1', cost: 10 });
    expect(settled).toMatchObject({ allowed: false, reason: 'blocked' });
    expect(settled.retryAfterMs).toBeGreaterThan(25_000);
    expect(settled.retryAfterMs).toBeLessThanOrEqual(30_000);
    expect(await limiter.adjust('big', 'k', 5)).toMatchObject({ allowed: false, reason: 'blocked' });
    expect(await limiter.adjust('big', 'k', -3)).toMatchObject({ allowed: false, reason: 'blocked' });
    expect(await limiter.peek('big', 'k')).toMatchObject({ allowed: false, reason: 'blocked' });
    expect(await limiter.take('big', 'k')).toMatchObject({ allowed: false, reason: 'blocked' });
    await limiter.unblock('big', 'k');
    expect(await limiter.peek('big', 'k')).toMatchObject({ allowed: true, remaining: 100 - 10 - 5 + 3 });
  });

  it('ends on the store\'s clock by itself', async () => {
    const store = recordStore();
    const { limiter } = limiterOn(store);
    await limiter.block('api', 'k', { forMs: 1000 });
    store.nowUs += 1_000_000;
    expect(await limiter.take('api', 'k')).toMatchObject({ allowed: true });
  });

  it('a key this node knows to be blocked stays refused while the store is down, whatever the fail mode', async () => {
    const store = recordStore();
    const clock = { ms: 0 };
    const { limiter } = limiterOn(store, { onStoreError: 'allow', circuitBreaker: false }, clock);
    await limiter.block('api', 'mine', { forMs: 5000 });
    // Another node's block, seen by this node in a store answer.
    const other = limiterOn(store).limiter;
    await other.block('api', 'theirs', { forMs: 5000 });
    expect((await limiter.take('api', 'theirs')).reason).toBe('blocked');
    store.failing = true;
    expect(await limiter.take('api', 'mine')).toMatchObject({ allowed: false, reason: 'blocked', retryAfterMs: 5000 });
    expect(await limiter.take('api', 'theirs')).toMatchObject({ allowed: false, reason: 'blocked' });
    expect(await limiter.take('api', 'free')).toMatchObject({ allowed: true, reason: 'store_error' });
    clock.ms += 5000;
    expect(await limiter.take('api', 'mine')).toMatchObject({ allowed: true, reason: 'store_error' });
  });

  it('a retried idempotent take from before the block does not make this node forget it (review 5, L3)', async () => {
    for (const onStoreError of ['allow', 'local'] as const) {
      const store = switchableStore();
      const limiter = createLimiter({ store, policies: { p: { capacity: 5, refillPerSecond: 1, onStoreError, ...(onStoreError === 'local' ? { local: { capacity: 5, refillPerSecond: 1 } } : {}) } }, circuitBreaker: false });
      expect(await limiter.take('p', 'k', { idempotencyKey: 'req-1' })).toMatchObject({ allowed: true });
      await limiter.block('p', 'k', { forMs: 60_000 });
      // The client's retry of its first request: the recorded answer, from before the block.
      expect(await limiter.take('p', 'k', { idempotencyKey: 'req-1' })).toMatchObject({ allowed: true, repeated: true });
      store.down = true;
      expect(await limiter.take('p', 'k')).toMatchObject({ allowed: false, reason: 'blocked' });
      await limiter.close();
    }
  });

  it('a store that keeps no records: the change rejects with StoreError, and onAudit hears of the failure', async () => {
    const store = recordStore();
    const { limiter, audits } = limiterOn({ ...store, override: undefined } as unknown as RecordStore);
    await expect(limiter.block('api', 'k', { forMs: 1000 })).rejects.toBeInstanceOf(StoreError);
    expect(audits).toEqual([expect.objectContaining({ action: 'block', error: expect.any(StoreError) })]);
  });
});

describe('two nodes that disagree about a policy-wide change, neither set of numbers the stricter', () => {
  // The policy: 2 at 100 per second. The change: 100 at one an hour. A key stepped by both nodes in turn
  // while only one has read the change (or its revert) used to flip between the two at every step,
  // carrying the debt each time: up to the larger capacity plus the faster rate (148 in 500 ms).
  // Changes are ordered now: the key moves once, and the node that has not read it yet decides under it.
  async function alternate(a: ReturnType<typeof limiterOn>, b: ReturnType<typeof limiterOn>, store: RecordStore, key: string, ms: number) {
    const limits = { a: new Set<number>(), b: new Set<number>() };
    let allowed = 0;
    for (let i = 0; i < ms; i++) {
      store.nowUs += 1000;
      a.clock.ms += 1;
      b.clock.ms += 1;
      const node = i % 2 === 0 ? a : b;
      const d = await node.limiter.take('fast', key);
      limits[node === a ? 'a' : 'b'].add(d.limit);
      if (d.allowed) allowed++;
    }
    return { allowed, limits };
  }

  it('a change read by one node only: the other decides under the key’s copy; at most the change’s 100 in 500 ms', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policyRefreshMs: 10_000 });
    const b = limiterOn(store, { policyRefreshMs: 10_000 });
    await a.limiter.take('fast', 'warm');
    await b.limiter.take('fast', 'warm');
    await a.limiter.setPolicyLimits('fast', { capacity: 100, refillPerSecond: SLOW });
    const { allowed, limits } = await alternate(a, b, store, 'k', 500);
    expect(limits).toEqual({ a: new Set([100]), b: new Set([100]) });
    expect(allowed).toBe(100);
  });

  it('a revert read by one node only: its marker stops the other installing the change again; at most the policy’s 2 + 50 in 500 ms', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policyRefreshMs: 10_000 });
    const b = limiterOn(store, { policyRefreshMs: 10_000 });
    await a.limiter.setPolicyLimits('fast', { capacity: 100, refillPerSecond: SLOW });
    await b.limiter.take('fast', 'warm');
    expect((await b.limiter.peek('fast', 'k')).limit).toBe(100);
    store.nowUs += 1000;
    await a.limiter.clearPolicyLimits('fast');
    const { allowed, limits } = await alternate(a, b, store, 'k', 500);
    expect(limits).toEqual({ a: new Set([2]), b: new Set([2]) });
    // 2 at once, then one each 10 ms for 500 ms.
    expect(allowed).toBeLessThanOrEqual(2 + 50);
    expect(allowed).toBeGreaterThanOrEqual(50);
    // Once b reads the revert, its steps leave the marker as it is.
    b.clock.ms += 10_000;
    store.nowUs += 10_000_000;
    expect((await b.limiter.take('fast', 'k')).limit).toBe(2);
    expect(store.records.get('p:fast:k') ?? store.records.get([...store.records.keys()].find((x) => x.endsWith('fast:k'))!)).toEqual({ policyId: expect.stringMatching(/^\d+\.$/) });
  });
});

describe('a policy-wide change: what an independent review found', () => {
  it('a node that only adjusts reads the change too, and obeys the key\'s copy (it sent no view, which dropped the copy)', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policyRefreshMs: 10_000 });
    const c = limiterOn(store, { policyRefreshMs: 10_000 });
    await a.limiter.setPolicyLimits('fast', { capacity: 100, refillPerSecond: SLOW });
    await a.limiter.take('fast', 'k');
    expect(await c.limiter.adjust('fast', 'k', 1)).toMatchObject({ limit: 100, remaining: 98 });
    expect(await c.limiter.adjust('fast', 'fresh', 1)).toMatchObject({ limit: 100, remaining: 99 });
    expect([...store.records.entries()].find(([k]) => k.endsWith('fast:k'))![1]).toMatchObject({ policyId: expect.stringMatching(/^\d+\./) });
  });

  it('a store clock that steps back: a change made after it still reaches a key holding a marker (a view was the reading\'s time, which outranked it)', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policyRefreshMs: 10 });
    await a.limiter.setPolicyLimits('fast', { capacity: 100, refillPerSecond: SLOW });
    expect((await a.limiter.take('fast', 'k')).limit).toBe(100);
    store.nowUs += 1000;
    await a.limiter.clearPolicyLimits('fast');
    // Two seconds on, a reading and a step leave the revert's marker on k.
    store.nowUs += 2_000_000;
    a.clock.ms += 20;
    expect((await a.limiter.take('fast', 'k')).limit).toBe(2);
    // The store's clock steps back 2.5 s (a failover to a server behind), and an incident lowers the numbers.
    store.nowUs -= 2_500_000;
    await a.limiter.setPolicyLimits('fast', { capacity: 5, refillPerSecond: SLOW });
    expect((await a.limiter.take('fast', 'k')).limit).toBe(5);
  });

  it('a key\'s clearLimits keeps its copy of the change in force; a node that has not read a revert reports the key\'s marker', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policyRefreshMs: 10_000 });
    const b = limiterOn(store, { policyRefreshMs: 10_000 });
    await a.limiter.setPolicyLimits('fast', { capacity: 100, refillPerSecond: SLOW });
    await b.limiter.take('fast', 'warm');
    await a.limiter.take('fast', 'k');
    expect(await a.limiter.clearLimits('fast', 'k')).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 100 }] });
    expect((await b.limiter.take('fast', 'k')).limit).toBe(100);
    await a.limiter.clearPolicyLimits('fast');
    await a.limiter.take('fast', 'k');
    // b still holds the change; k holds the revert's marker, which decides b's steps on it.
    expect(await b.limiter.getLimits('fast', 'k')).toMatchObject({ source: 'policy', limits: [{ capacity: 2 }] });
    expect((await b.limiter.take('fast', 'k')).limit).toBe(2);
  });
});

describe('a key’s change carries its bucket under the node’s view of a policy-wide change, as its steps do (review 3)', () => {
  // fast: 2 at 100/s, refilled in 20 ms; the change: 2 an hour.
  async function spentUnderChange(expiresInMs?: number) {
    const store = recordStore();
    const a = limiterOn(store, { policyRefreshMs: 10_000 });
    await a.limiter.setPolicyLimits('fast', { capacity: 2, refillPerSecond: SLOW });
    await a.limiter.setLimits('fast', 'k', { capacity: 2, refillPerSecond: SLOW }, expiresInMs === undefined ? {} : { expiresInMs });
    expect(await takes(a.limiter, 'fast', 'k', 3)).toBe(2);
    return { store, ...a };
  }

  it('clearLimits under a change: the key is in the change at once, its tokens still spent (F1: it was carried to the policy’s numbers and refilled at their rate)', async () => {
    const { store, limiter } = await spentUnderChange();
    expect(await limiter.clearLimits('fast', 'k')).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 2, refillPerSecond: SLOW }] });
    store.nowUs += 200_000;
    expect(await limiter.take('fast', 'k')).toMatchObject({ allowed: false, limit: 2, remaining: 0 });
  });

  it('block and unblock after the key’s own numbers ended: the bucket goes to the change at their end, not past it to the policy’s numbers (F2)', async () => {
    const { store, limiter } = await spentUnderChange(1000);
    store.nowUs += 2_000_000;
    await limiter.block('fast', 'k', { forMs: 60_000 });
    await limiter.unblock('fast', 'k');
    store.nowUs += 200_000;
    expect(await limiter.take('fast', 'k')).toMatchObject({ allowed: false, limit: 2, remaining: 0 });
  });

  it('clearLimits after the key’s own numbers ended: the same (F2)', async () => {
    const { store, limiter } = await spentUnderChange(1000);
    store.nowUs += 2_000_000;
    await limiter.clearLimits('fast', 'k');
    store.nowUs += 200_000;
    expect(await limiter.take('fast', 'k')).toMatchObject({ allowed: false, limit: 2, remaining: 0 });
  });
});

describe('a settlement under a policy-wide change', () => {
  it('settles under the change, as every other step does (it sent no view, so the key’s copy was dropped and the bucket carried to the policy’s numbers)', async () => {
    const limiter = createLimiter({ store: memoryStore(), policies: { p: { capacity: 10, refillPerSecond: SLOW } } });
    await limiter.setPolicyLimits('p', { capacity: 100, refillPerSecond: SLOW });
    expect(await limiter.take('p', 'k', { cost: 6, idempotencyKey: 'job' })).toMatchObject({ allowed: true, limit: 100, remaining: 94 });
    expect(await limiter.settle('p', 'k', { charge: 'job', cost: 5 })).toMatchObject({ limit: 100, remaining: 95 });
    expect(await limiter.peek('p', 'k')).toMatchObject({ limit: 100, remaining: 95 });
  });
});

describe('a policy-wide change: read by each node at most every policyRefreshMs', () => {
  it('obeyed at once by the node that set it, by another node within policyRefreshMs; per-key numbers win; a revert too', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policyRefreshMs: 1000 });
    const b = limiterOn(store, { policyRefreshMs: 1000 });
    expect((await b.limiter.take('api', 'k1')).limit).toBe(2); // b's first reading: no change
    await a.limiter.setLimits('api', 'own', { capacity: 3, refillPerSecond: SLOW });
    const set = await a.limiter.setPolicyLimits('api', { capacity: 10, refillPerSecond: SLOW }, { actor: 'ops' });
    expect(set).toMatchObject({ policy: 'api', source: 'policy-wide', limits: [{ capacity: 10 }], previous: { source: 'policy' } });
    expect(a.audits.at(-1)).toMatchObject({ action: 'policy-limits', policy: 'api', key: '*', actor: 'ops', after: { source: 'policy-wide' } });
    expect((await a.limiter.take('api', 'k2')).limit).toBe(10);
    // b's reading is 400 ms old: not read again, the old numbers still decide there.
    b.clock.ms = 400;
    const reads = store.calls.override;
    expect((await b.limiter.take('api', 'k1')).limit).toBe(2);
    expect(store.calls.override).toBe(reads);
    // 1000 ms: no decision there uses a reading that old; many at once make one read.
    b.clock.ms = 1000;
    const decisions = await Promise.all(Array.from({ length: 20 }, () => b.limiter.take('api', 'k1')));
    expect(store.calls.override).toBe(reads + 1);
    expect(decisions.map((d) => d.limit)).toEqual(Array(20).fill(10));
    // k1 had spent 2 of 2 under the policy; carried to 10 it has 8 left, less the 20 takes' 8.
    expect(decisions.filter((d) => d.allowed)).toHaveLength(8);
    expect((await b.limiter.take('api', 'own')).limit).toBe(3);
    expect(await b.limiter.getLimits('api', 'fresh')).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 10 }] });
    expect(await b.limiter.getPolicyLimits('api')).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 10 }] });
    // The revert, through a: b still applies the change until its reading is policyRefreshMs old.
    await a.limiter.clearPolicyLimits('api');
    expect((await a.limiter.take('api', 'k2')).limit).toBe(2);
    b.clock.ms = 1400;
    expect((await b.limiter.take('api', 'k3')).limit).toBe(10);
    b.clock.ms = 2000;
    expect((await b.limiter.take('api', 'k3')).limit).toBe(2);
    expect((await b.limiter.take('api', 'k1')).limit).toBe(2);
  });

  it('past half of policyRefreshMs a reading starts in the background: the decision does not wait for it', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policyRefreshMs: 1000 });
    const b = limiterOn(store, { policyRefreshMs: 1000 });
    await b.limiter.take('api', 'k');
    await a.limiter.setPolicyLimits('api', { capacity: 7, refillPerSecond: SLOW });
    b.clock.ms = 600;
    const reads = store.calls.override;
    expect((await b.limiter.take('api', 'k')).limit).toBe(2);
    expect(store.calls.override).toBe(reads + 1);
    expect((await b.limiter.take('api', 'k')).limit).toBe(7);
  });

  it('on an in-process store (memory) every limiter on it obeys a change at once, with no reading to age', async () => {
    const store = memoryStore();
    const a = createLimiter({ store, policies: { api: { capacity: 2, refillPerSecond: SLOW } } });
    const b = createLimiter({ store, policies: { api: { capacity: 2, refillPerSecond: SLOW } } });
    expect((await b.take('api', 'k')).limit).toBe(2);
    await a.setPolicyLimits('api', { capacity: 9, refillPerSecond: SLOW });
    expect(await b.take('api', 'k')).toMatchObject({ limit: 9, remaining: 7 });
    // A limiter made after the change reads it on its first decision.
    const c = createLimiter({ store, policies: { api: { capacity: 2, refillPerSecond: SLOW } } });
    expect((await c.take('api', 'j')).limit).toBe(9);
    await b.clearPolicyLimits('api');
    expect((await a.take('api', 'k')).limit).toBe(2);
    expect((await c.take('api', 'j')).limit).toBe(2);
  });

  it('policyRefreshMs is validated', () => {
    expect(() => limiterOn(recordStore(), { policyRefreshMs: 5 })).toThrow(/policyRefreshMs/);
    expect(() => limiterOn(recordStore(), { policyRefreshMs: 60_001 })).toThrow(/policyRefreshMs.*from 10 to 60000/);
    expect(() => limiterOn(recordStore(), { policyRefreshMs: 60_000 })).not.toThrow();
  });
});

describe('the deny cache and leases after a change (two nodes on one store)', () => {
  const policies = {
    fast: { capacity: 2, refillPerSecond: 1 },
    hot: { capacity: 100, refillPerSecond: SLOW, lease: { tokens: 10, maxAgeMs: 2000 } },
  };

  it('a cached refusal: dropped at once by a change through this node; through another, it lasts at most its retryAfterMs', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policies, denyCache: true });
    const b = limiterOn(store, { policies });
    expect(await takes(a.limiter as never, 'fast' as never, 'k', 3)).toBe(2);
    const refused = await a.limiter.take('fast', 'k');
    expect(refused).toMatchObject({ allowed: false, reason: 'deny_cache' });
    await b.limiter.setLimits('fast', 'k', { capacity: 10, refillPerSecond: 1 });
    a.clock.ms = refused.retryAfterMs - 1;
    expect(await a.limiter.take('fast', 'k')).toMatchObject({ allowed: false, reason: 'deny_cache' });
    a.clock.ms = refused.retryAfterMs;
    expect(await a.limiter.take('fast', 'k')).toMatchObject({ allowed: true, limit: 10 });
    // Through a itself: at once.
    expect(await takes(a.limiter as never, 'fast' as never, 'j', 3)).toBe(2);
    expect((await a.limiter.take('fast', 'j')).reason).toBe('deny_cache');
    await a.limiter.setLimits('fast', 'j', { capacity: 10, refillPerSecond: 1 });
    expect(await a.limiter.take('fast', 'j')).toMatchObject({ allowed: true, limit: 10 });
  });

  it('a cached refusal lasts at most policyRefreshMs: a long one (a deep debt under a slow refill) is asked of the store again, so another node\'s raise is seen within it', async () => {
    const store = recordStore();
    const slow = { api: { capacity: 10, refillPerSecond: 1 / 3600 } };
    const a = limiterOn(store, { policies: slow, denyCache: true, policyRefreshMs: 1000 });
    const b = limiterOn(store, { policies: slow, policyRefreshMs: 1000 });
    expect(await takes(a.limiter as never, 'api' as never, 'k', 11)).toBe(10);
    const refused = await a.limiter.take('api', 'k');
    expect(refused).toMatchObject({ allowed: false, reason: 'deny_cache', retryAfterMs: 3_600_000 });
    // Raised through b: a's cached refusal (an hour long) holds for at most policyRefreshMs.
    await b.limiter.setLimits('api', 'k', { capacity: 20, refillPerSecond: 1 / 3600 });
    a.clock.ms = 999;
    expect(await a.limiter.take('api', 'k')).toMatchObject({ allowed: false, reason: 'deny_cache', retryAfterMs: 3_600_000 - 999 });
    const calls = store.calls.step;
    a.clock.ms = 1000;
    expect(await a.limiter.take('api', 'k')).toMatchObject({ allowed: true, limit: 20, remaining: 9 });
    expect(store.calls.step).toBe(calls + 1);
  });

  it('a lease: a block through this node cuts it at once; through another, within the lease\'s usable age', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policies });
    const b = limiterOn(store, { policies });
    // A key asked for twice is hot: the second take waits for a grant of 10.
    await a.limiter.take('hot', 'k');
    await a.limiter.take('hot', 'k');
    expect(a.limiter.stats().leases.tokens).toBe(9);
    await b.limiter.block('hot', 'k', { forMs: 60_000 });
    a.clock.ms = 1999;
    expect(await a.limiter.take('hot', 'k')).toMatchObject({ allowed: true, reason: 'lease' });
    a.clock.ms = 2000;
    expect(await a.limiter.take('hot', 'k')).toMatchObject({ allowed: false, reason: 'blocked' });
    expect(await a.limiter.take('hot', 'k')).toMatchObject({ allowed: false, reason: 'blocked' });
    // Through this node: at once, and the lease's 9 unused tokens go back (a block refuses takes, not refunds).
    await a.limiter.take('hot', 'j');
    await a.limiter.take('hot', 'j');
    expect(a.limiter.stats().leases.tokens).toBe(9);
    await a.limiter.block('hot', 'j', { forMs: 60_000 });
    expect(a.limiter.stats().leases.tokens).toBe(0);
    expect(await a.limiter.take('hot', 'j')).toMatchObject({ allowed: false, reason: 'blocked' });
    await new Promise((r) => setTimeout(r, 10));
    await b.limiter.unblock('hot', 'j');
    // 1 taken alone, then a grant of 10 of which 1 was used: 2 spent.
    expect(await b.limiter.peek('hot', 'j')).toMatchObject({ allowed: true, remaining: 98 });
  });

  it('a lease: setLimits through this node gives its tokens back, carried into the new numbers', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policies });
    const b = limiterOn(store, { policies });
    await a.limiter.take('hot', 'j');
    await a.limiter.take('hot', 'j');
    expect(a.limiter.stats().leases.tokens).toBe(9);
    expect((await b.limiter.peek('hot', 'j')).remaining).toBe(89);
    await a.limiter.setLimits('hot', 'j', { capacity: 200, refillPerSecond: SLOW });
    expect(a.limiter.stats().leases.tokens).toBe(0);
    await new Promise((r) => setTimeout(r, 10));
    expect(await b.limiter.peek('hot', 'j')).toMatchObject({ limit: 200, remaining: 198 });
    expect(await a.limiter.take('hot', 'j')).toMatchObject({ allowed: true, limit: 200, remaining: 197 });
  });

  it('a lease granted under the policy\'s numbers ends within its usable age after another node\'s setLimits; the key is then decided under the new numbers', async () => {
    const store = recordStore();
    const a = limiterOn(store, { policies });
    const b = limiterOn(store, { policies });
    await a.limiter.take('hot', 'k');
    await a.limiter.take('hot', 'k');
    await b.limiter.setLimits('hot', 'k', { capacity: 20, refillPerSecond: SLOW });
    expect((await a.limiter.take('hot', 'k')).reason).toBe('lease');
    a.clock.ms = 2000;
    const d = await a.limiter.take('hot', 'k');
    expect(d).toMatchObject({ allowed: true, limit: 20 });
    expect(d.reason).toBeUndefined();
    expect(a.limiter.stats().leases.tokens).toBe(0);
  });
});

/** One policy of `capacity` at 1 a second on a memory store, its clock and the limiter's moved together by tick(ms). */
function onePolicy(capacity: number) {
  let nowMs = 1_000_000;
  const store = memoryStore({ nowMs: () => nowMs });
  const clock = { ms: 0 };
  const limiter = createLimiter({ store, policies: { p: { capacity, refillPerSecond: 1 } }, monotonicMs: () => clock.ms, policyRefreshMs: 10 });
  const tick = (ms: number) => {
    nowMs += ms;
    clock.ms += ms;
  };
  return { store, limiter, tick, nowUs: () => nowMs * 1000 };
}

describe('a revert with no change in force writes nothing', () => {
  it('a revert\'s marker or a change that has ended stay as they are: no new version, so keys are not frozen up to one (a take a second under 1 a second, a revert a second: all 30 allowed, where 1 was before); with no record at all (none made, or the record lost) a revert writes its marker, which every node reads', async () => {
    const { store, limiter, tick } = onePolicy(1);
    const record = async () => (await store.override!('el:p*', { base: [] })).after;
    expect((await limiter.clearPolicyLimits('p')).previous).toMatchObject({ source: 'policy' });
    const first = await record();
    expect(first).toEqual({ policyId: expect.stringMatching(/^\d+\.0\.0\./) });
    let allowed = 0;
    for (let i = 0; i < 30; i++) {
      if ((await limiter.take('p', 'k')).allowed) allowed++;
      tick(990);
      await limiter.clearPolicyLimits('p');
      tick(10);
    }
    expect(allowed).toBe(30);
    expect(await record()).toEqual(first);
    // A change, its revert (a marker of a new version), then reverts that change nothing.
    await limiter.setPolicyLimits('p', { capacity: 1, refillPerSecond: 0.5 });
    await limiter.clearPolicyLimits('p');
    const marker = await record();
    expect(marker).toEqual({ policyId: expect.stringMatching(/^\d+\.\d+\.\d+\./) });
    tick(5);
    await limiter.clearPolicyLimits('p');
    expect(await record()).toEqual(marker);
    // A change that has ended: kept, with its end (nodes read it ended).
    await limiter.setPolicyLimits('p', { capacity: 1, refillPerSecond: 0.5 }, { expiresInMs: 100 });
    tick(200);
    const ended = (await store.override!('el:p*', { base: [] })).stored;
    await limiter.clearPolicyLimits('p');
    expect((await store.override!('el:p*', { base: [] })).stored).toEqual(ended);
  });
});

describe('a policy-wide change to the numbers already in force writes nothing', () => {
  it('the same numbers for the same limits, neither with an end: the record stays (a take every 2 s, the same change every second: all 30 allowed, where 10 were); other numbers, or an end, write', async () => {
    const { store, limiter, tick, nowUs } = onePolicy(10);
    const record = async () => (await store.override!('el:p*', { base: [] })).stored;
    await limiter.setPolicyLimits('p', { capacity: 10, refillPerSecond: 1 });
    const first = await record();
    let allowed = 0;
    for (let s = 0; s < 60; s++) {
      await limiter.setPolicyLimits('p', { capacity: 10, refillPerSecond: 1 });
      tick(10);
      if (s % 2 === 0) for (let i = 0; i < 2; i++) if ((await limiter.take('p', 'k')).allowed) allowed++;
      tick(990);
    }
    expect(await record()).toEqual(first);
    expect(allowed).toBe(60);
    await limiter.setPolicyLimits('p', { capacity: 10, refillPerSecond: 2 });
    const other = await record();
    expect(other).not.toEqual(first);
    await limiter.setPolicyLimits('p', { capacity: 10, refillPerSecond: 2 }, { expiresInMs: 60_000 });
    expect((await record())!.untilUs).toBe(nowUs() + 60_000_000);
  });
});
