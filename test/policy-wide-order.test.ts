// What a node holds of a policy-wide change goes by the record's version (the store's order of
// changes), never by the order its calls started or were answered in (review 5, M1): a background
// reading that started after this node's own change, but that the store made before it (Upstash REST,
// MongoDB's pool and Durable Object fetches can reorder), was answered after the change and undid it,
// so the node that made the change ignored it for up to policyRefreshMs. And a limiter that decided
// before it had read the record (memory: until a first change in the process; a Worker whose first
// reading was cancelled) kept its leases and cached refusals through the change (review 5, M2).
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { numbersOf, type OverrideRecord } from '../src/core/override.js';
import { resolvePolicy } from '../src/core/policy.js';
import { createLimiter, memoryStore, type Limiter, type Store } from '../src/index.js';
import { newEntry } from '../src/limiter/entry.js';
import { createPolicyWide, READ_GRACE_MS, seenOf } from '../src/limiter/policy-wide.js';
import { mongoStore } from '../src/stores/mongodb.js';
import { redisStore } from '../src/stores/redis.js';
import { MingoCollection } from './support/mingo-collection.js';

const clients: IORedis[] = [];
afterAll(() => {
  for (const c of clients) c.disconnect();
});

const macrotask = () => new Promise((r) => setTimeout(r, 0));

async function takes(limiter: Limiter, policy: string, key: string, n: number): Promise<number> {
  let allowed = 0;
  for (let i = 0; i < n; i++) if ((await limiter.take(policy, key)).allowed) allowed++;
  return allowed;
}

/**
 * A remote store (not in-process) over `inner` whose write of a policy's record can be held in flight
 * (a reordering transport), with the policy record's readings answered meanwhile; `read()` waits for
 * those answers.
 */
function reordering(inner: Store) {
  let gate: (() => void) | undefined;
  let holding = false;
  const readings: Promise<unknown>[] = [];
  const store: Store = {
    name: inner.name,
    step: (key, args, o) => inner.step(key, args, o),
    reset: (key) => inner.reset(key),
    ping: () => inner.ping(),
    async override(key, args, o) {
      if (!key.endsWith('*')) return inner.override!(key, args, o);
      if (args.limits === undefined) {
        const reading = inner.override!(key, args, o);
        readings.push(reading);
        return reading;
      }
      if (holding) await new Promise<void>((r) => (gate = r));
      return inner.override!(key, args, o);
    },
  };
  return {
    store,
    hold: () => void (holding = true),
    /** Every reading answered, and what the limiter does with the answers done. */
    read: async () => {
      await Promise.all(readings);
      await macrotask();
    },
    release: () => {
      holding = false;
      gate!();
    },
  };
}

const STORES: [string, () => Store][] = [
  ['memory (as a remote store)', () => memoryStore()],
  [
    'redis',
    () => {
      const client = new IORedis(inject('redisUrl'));
      clients.push(client);
      return redisStore({ client });
    },
  ],
  ['mongodb (mingo)', () => mongoStore({ collection: new MingoCollection() })],
];

describe('the node that makes a policy-wide change obeys it at once, whatever order the store answers in (review 5, M1)', () => {
  for (const [name, make] of STORES) {
    it(`${name}: a reading the store made before the change, answered after it, undoes neither the change nor its revert`, async () => {
      const s = reordering(make());
      const clock = { ms: 0 };
      const prefix = `ord-${Math.random().toString(36).slice(2)}:`;
      const limiter = createLimiter({ store: s.store, prefix, policies: { p: { capacity: 10, refillPerSecond: 100 } }, policyRefreshMs: 1000, monotonicMs: () => clock.ms });
      await limiter.take('p', 'warm'); // the first reading, at 0

      // Past half of policyRefreshMs: the change's write is held in flight; a decision 1 ms later starts
      // a reading in the background, which the store makes (no change yet) and answers first.
      clock.ms = 600;
      s.hold();
      const changing = limiter.setPolicyLimits('p', { capacity: 1, refillPerSecond: 0.1 });
      clock.ms = 601;
      await limiter.take('p', 'warm');
      await s.read();
      s.release();
      expect(await changing).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 1 }] });
      expect(await takes(limiter, 'p', 'k', 10)).toBe(1);
      expect(await limiter.getLimits('p', 'k2')).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 1 }] });

      // The revert the same way: the reading made before it finds the change, and is answered last.
      clock.ms = 1200;
      s.hold();
      const reverting = limiter.clearPolicyLimits('p');
      clock.ms = 1201;
      await limiter.take('p', 'warm');
      await s.read();
      s.release();
      expect(await reverting).toMatchObject({ source: 'policy', limits: [{ capacity: 10 }] });
      expect(await takes(limiter, 'p', 'j', 10)).toBe(10);
      expect(await limiter.getLimits('p', 'j2')).toMatchObject({ source: 'policy' });
    });
  }
});

/** One policy's reading on a remote store, with each reading answered (or lost) by the test. */
function readings() {
  const clock = { ms: 0 };
  const pending: { answer: (record: OverrideRecord | undefined, atUs: number) => void }[] = [];
  const changes: string[] = [];
  const policy = resolvePolicy('api', { capacity: 5, refillPerSecond: 1 }, { failMode: 'open', timeoutMs: 100 } as never);
  const entry = newEntry(policy, 'p:');
  const wide = createPolicyWide({
    store: { name: 'remote' } as Store,
    refreshMs: 1000,
    monotonicMs: () => clock.ms,
    read: () => new Promise((resolve) => pending.push({ answer: (record, atUs) => resolve(record === undefined ? { atUs } : { after: record, atUs }) })),
    onChange: (e) => changes.push(e.change?.id ?? 'none'),
  });
  /** A change's record of version `v` (the store clock's µs when it was made), to capacity 2. */
  const change = (v: number, untilUs?: number): OverrideRecord => ({ limits: [numbersOf({ ...policy.limits[0]!, capacityUnits: 2 * policy.tokenUnits })], policyId: `${v}.c${v}#api`, ...(untilUs === undefined ? {} : { untilUs }) });
  return { clock, pending, changes, entry, wide, change };
}

describe('readings answered out of order', () => {
  it('one of an older version never replaces the record held, and each answer counts the reading\'s age from its start', async () => {
    const { clock, pending, changes, entry, wide, change } = readings();
    const first = wide.refresh(entry, 0)!;
    pending[0]!.answer(undefined, 1_000);
    await first;
    // Two readings in flight (the first taken for lost, as a cancelled one is, then replaced).
    clock.ms = 600;
    wide.refresh(entry, 600);
    clock.ms = 600 + 200;
    wide.refresh(entry, clock.ms);
    expect(pending).toHaveLength(3);
    // The first made after a change; the later-started one made before it, and answered last.
    pending[1]!.answer(change(5_000), 6_000);
    await macrotask();
    expect(entry.change?.id).toBe('5000.c5000#api');
    expect(changes).toEqual(['5000.c5000#api']);
    pending[2]!.answer(undefined, 4_000);
    await macrotask();
    expect(entry.change?.id).toBe('5000.c5000#api');
    expect(changes).toHaveLength(1);
    expect(entry.wide.readAtMs).toBe(800);

    // A reading of the same version answered later refreshes the age, and changes nothing else.
    clock.ms = 1400;
    wide.refresh(entry, 1400);
    pending[3]!.answer(change(5_000), 7_000);
    await macrotask();
    expect(entry.wide.readAtMs).toBe(1400);
    expect(wide.fresh(entry)).toBe(true);
    expect(changes).toHaveLength(1);

    // The node's own change answered after a reading that started later but was made before it.
    clock.ms = 2000;
    wide.refresh(entry, 2000);
    wide.changed(entry, change(9_000), 9_000, 1990);
    expect(entry.change?.id).toBe('9000.c9000#api');
    pending[4]!.answer(change(5_000), 8_000);
    await macrotask();
    expect(entry.change?.id).toBe('9000.c9000#api');
    expect(entry.wide.readAtMs).toBe(2000);
    expect(changes).toEqual(['5000.c5000#api', '9000.c9000#api']);
  });

  it('a change that ends: a later reading that finds no record (or its marker, as stores read it back) ends it, and one made before the end answered after does not bring it back; steps go on sending it, ended (review 10, H1)', async () => {
    for (const answer of [undefined, { policyId: '5000.c5000#api' }]) {
      const { clock, pending, changes, entry, wide, change } = readings();
      const first = wide.refresh(entry, 0)!;
      pending[0]!.answer(change(5_000, 50_000), 6_000);
      await first;
      // The first reading finds the change: nothing was decided before it, so nothing is dropped.
      expect(changes).toEqual([]);
      expect(entry.change).toMatchObject({ id: '5000.c5000#api', untilUs: 50_000 });
      clock.ms = 600;
      wide.refresh(entry, 600);
      clock.ms = 900;
      wide.refresh(entry, 900);
      pending[2]!.answer(answer, 60_000);
      await macrotask();
      // Ended: leases and cached refusals go (onChange), and steps send the change with its end, so that
      // a key's copy becomes its marker and a step reckons the policy's numbers from that end.
      expect(changes).toEqual(['5000.c5000#api']);
      expect(entry.change).toMatchObject({ id: '5000.c5000#api', untilUs: 50_000 });
      expect(seenOf(entry)).toBeUndefined();
      expect(entry.takeOne.policy).toMatchObject({ id: '5000.c5000#api', untilUs: 50_000 });
      pending[1]!.answer(change(5_000, 50_000), 40_000);
      await macrotask();
      expect(changes).toEqual(['5000.c5000#api']);
      // A revert's marker is another record: no change, its version seen.
      clock.ms = 1500;
      wide.refresh(entry, 1500);
      pending[3]!.answer({ policyId: '70000.r#api' }, 70_000);
      await macrotask();
      expect(entry.change).toBeUndefined();
      expect(seenOf(entry)).toBe(70_000);
      expect(changes).toEqual(['5000.c5000#api', 'none']);
    }
  });

  it('a change first read ended (a node that never held it live): sent ended, with its end, where the store says the record as stored; else its version is seen (review 11, F1)', async () => {
    const { pending, entry, wide, change } = readings();
    const first = wide.refresh(entry, 0)!;
    pending[0]!.answer({ policyId: '5000.c5000#api' }, 60_000);
    await first;
    expect(entry.change).toBeUndefined();
    expect(seenOf(entry)).toBe(5_000);
    // OverrideResult.stored: the change as stored, its end included (every store of this repository says it).
    const policy = resolvePolicy('api', { capacity: 5, refillPerSecond: 1 }, { failMode: 'open', timeoutMs: 100 } as never);
    const fresh = newEntry(policy, 'p:');
    const changes: string[] = [];
    const wide2 = createPolicyWide({
      store: { name: 'remote' } as Store,
      refreshMs: 1000,
      monotonicMs: () => 0,
      read: async () => ({ after: { policyId: '5000.c5000#api' }, stored: change(5_000, 50_000), atUs: 60_000 }),
      onChange: (e) => changes.push(e.change?.id ?? 'none'),
    });
    await wide2.refresh(fresh, 0);
    expect(fresh.change).toMatchObject({ id: '5000.c5000#api', untilUs: 50_000 });
    expect(seenOf(fresh)).toBeUndefined();
    expect(changes).toEqual([]);
  });

  it('a first reading that is lost (a Worker request cancelled): the decisions made meanwhile are dropped when a later reading finds a change (review 5, M2)', async () => {
    const { clock, pending, changes, entry, wide, change } = readings();
    // Never answered; the decision waits at most timeoutMs + grace, then decides under the policy's numbers.
    await wide.refresh(entry, 0);
    expect(entry.change).toBeUndefined();
    clock.ms = 100 + READ_GRACE_MS + 1;
    const next = wide.refresh(entry, clock.ms)!;
    expect(pending).toHaveLength(2);
    pending[1]!.answer(change(5_000), 6_000);
    await next;
    expect(entry.change?.id).toBe('5000.c5000#api');
    expect(changes).toEqual(['5000.c5000#api']);
  });
});

describe('memory store: the first policy-wide change in a process (review 5, M2)', () => {
  const SLOW = 1 / 3600;

  it('drops every limiter’s leases of the policy: 0 of 60 admitted after a change to capacity 1, on the limiter that made it and on another', async () => {
    const clock = { ms: 1_790_000_000_000 };
    const store = memoryStore({ nowMs: () => clock.ms });
    const policies = { p: { capacity: 100, refillPerSecond: 10, lease: { tokens: 50, maxAgeMs: 10_000 } } };
    const a = createLimiter({ store, policies, monotonicMs: () => clock.ms });
    const b = createLimiter({ store, policies, monotonicMs: () => clock.ms });
    for (let i = 0; i < 5; i++) {
      await a.take('p', 'ka');
      await b.take('p', 'kb');
      await macrotask();
    }
    expect(a.stats().leases.tokens).toBeGreaterThan(40);
    expect(b.stats().leases.tokens).toBeGreaterThan(40);
    await a.setPolicyLimits('p', { capacity: 1, refillPerSecond: 0.1 });
    expect(a.stats().leases.tokens).toBe(0);
    // The keys' debts are carried into capacity 1: nothing is left on either.
    expect(await takes(a, 'p', 'ka', 60)).toBe(0);
    expect(await takes(b, 'p', 'kb', 60)).toBe(0);
    expect(b.stats().leases.tokens).toBe(0);
  });

  it('drops every limiter’s cached refusals; a limiter made after the change drops none on its first reading of it', async () => {
    const store = memoryStore();
    const policies = { d: { capacity: 2, refillPerSecond: SLOW }, e: { capacity: 1, refillPerSecond: SLOW } };
    const a = createLimiter({ store, policies, denyCache: true });
    const b = createLimiter({ store, policies, denyCache: true });
    for (const [limiter, key] of [[a, 'x'], [b, 'y']] as const) {
      expect(await takes(limiter, 'd', key, 3)).toBe(2);
      expect(await limiter.take('d', key)).toMatchObject({ allowed: false, reason: 'deny_cache' });
    }
    await a.setPolicyLimits('d', { capacity: 10, refillPerSecond: SLOW });
    // 2 spent of 10: both keys have 8.
    expect(await a.take('d', 'x')).toMatchObject({ allowed: true, limit: 10, remaining: 7 });
    expect(await b.take('d', 'y')).toMatchObject({ allowed: true, limit: 10, remaining: 7 });

    const c = createLimiter({ store, policies, denyCache: true });
    expect(await takes(c, 'e', 'z', 2)).toBe(1);
    expect(await c.take('e', 'z')).toMatchObject({ allowed: false, reason: 'deny_cache' });
    expect(await c.take('d', 'w')).toMatchObject({ allowed: true, limit: 10 });
    expect(await c.take('e', 'z')).toMatchObject({ allowed: false, reason: 'deny_cache' });
  });
});
