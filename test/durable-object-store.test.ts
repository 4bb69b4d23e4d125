// The Durable Object store inside workerd (Miniflare): the one conformance suite, with one object per key
// and with hashed shards; persistence across a restart; bad input; and the sharding hash.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { ConfigError, createLimiter } from '../src/index.js';
import type { Store } from '../src/store.js';
import { durableObjectStore } from '../src/stores/durable-object.js';
import { adjustArgs, stepArgs } from '../src/core/gcra.js';
import { baseNumbers } from '../src/core/override.js';
import { resolvePolicy } from '../src/core/policy.js';
import { startDurableObjects, type WorkerdDurableObjects } from '../scripts/lib/workerd-durable-object.js';
import { storeConformance } from './support/conformance.js';
import { checkGrantsAgainstModel, checkMultiAgainstModel, checkTakesAgainstModel, leaseOpsArb, multiLimitsArb, multiOpsArb, rateArb, takeOpsArb } from './support/exact-bucket.js';
import { checkOverridesAgainstModel, overrideCaseArb } from './support/exact-override.js';

let workerd: Promise<WorkerdDurableObjects> | undefined;
const shared = () => (workerd ??= startDurableObjects());
afterAll(async () => {
  await (await workerd)?.dispose();
});

storeConformance('durable object (one object per key, in workerd)', {
  create: async () => (await shared()).store(),
  clockResolutionMs: 1,
});
storeConformance('durable object (16 hashed shards, in workerd)', {
  create: async () => (await shared()).store({ shards: 16 }),
  clockResolutionMs: 1,
});

describe('durable object store', () => {
  it('buckets survive a restart of workerd (state is in the object storage, not in memory)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'edge-limiter-do-'));
    const first = await startDurableObjects({ persistDir: dir });
    // A minute of debt, so that however long the restart takes on a loaded machine, a refilled bucket
    // (debt 0) and a kept one are far apart.
    const args = { limits: [{ costUnits: 60_000_000, limitUnits: 120_000_000, refillUnitsPerUs: 1 }] };
    const t0 = performance.now();
    expect(await first.store().step('persisted', args)).toMatchObject({ allowed: true });
    await first.dispose();
    const second = await startDurableObjects({ persistDir: dir });
    try {
      const peek = await second.store().step('persisted', { limits: [{ costUnits: 0, limitUnits: 120_000_000, refillUnitsPerUs: 1 }] });
      const elapsedMs = performance.now() - t0;
      // The debt (1 unit per µs) drained by the time that passed, no more: the restart did not refill the bucket.
      expect(peek.debtUnits[0]).toBeGreaterThanOrEqual(60_000_000 - (Math.ceil(elapsedMs) + 1) * 1000);
      expect(peek.debtUnits[0]).toBeLessThanOrEqual(60_000_000);
    } finally {
      await second.dispose();
    }
  }, 60_000);

  it('refuses a namespace that is not one, and a bad shard count, naming the field', () => {
    expect(() => durableObjectStore({} as never)).toThrow(ConfigError);
    expect(() => durableObjectStore({} as never)).toThrow(/namespace/);
    const ns = { idFromName: () => ({}), get: () => ({ fetch: async () => new Response('{}') }) };
    expect(() => durableObjectStore({ namespace: ns, shards: 0 })).toThrow(/shards/);
    expect(() => durableObjectStore({ namespace: ns, shards: 1.5 })).toThrow(/shards/);
  });

  it('maps keys to objects: one per key by default; with shards, a stable hash spread over all of them', async () => {
    const names: string[] = [];
    const ns = {
      idFromName: (n: string) => (names.push(n), n),
      get: () => ({ fetch: async () => Response.json({ allowed: true, debtUnits: [0] }) }),
    };
    await durableObjectStore({ namespace: ns }).step('user:1', { limits: [{ costUnits: 1, limitUnits: 2, refillUnitsPerUs: 1 }] });
    expect(names).toEqual(['user:1']);
    names.length = 0;
    const sharded = durableObjectStore({ namespace: ns, shards: 8 });
    for (let i = 0; i < 800; i++) await sharded.step(`user:${i}`, { limits: [{ costUnits: 1, limitUnits: 2, refillUnitsPerUs: 1 }] });
    const counts = new Map<string, number>();
    for (const n of names) counts.set(n, (counts.get(n) ?? 0) + 1);
    expect(counts.size).toBe(8);
    for (const c of counts.values()) expect(c).toBeGreaterThan(60);
    names.length = 0;
    await sharded.step('user:1', { limits: [{ costUnits: 1, limitUnits: 2, refillUnitsPerUs: 1 }] });
    await sharded.step('user:1', { limits: [{ costUnits: 1, limitUnits: 2, refillUnitsPerUs: 1 }] });
    expect(names[0]).toBe(names[1]);
  });

  it('an object error is a StoreError, so the fail mode decides', async () => {
    const ns = { idFromName: (n: string) => n, get: () => ({ fetch: async () => new Response('boom', { status: 500 }) }) };
    await expect(durableObjectStore({ namespace: ns }).step('k', { limits: [{ costUnits: 1, limitUnits: 2, refillUnitsPerUs: 1 }] })).rejects.toMatchObject({ name: 'StoreError' });
  });
});

/** A Durable Object's storage in a Map, values copied in and out as the platform's are; the alarm set in `alarm.at`. */
function fakeStorage() {
  const data = new Map<string, unknown>();
  const alarm: { at: number | null } = { at: null };
  const storage = {
    get: async <T,>(k: string) => structuredClone(data.get(k)) as T | undefined,
    put: async (k: string, v: unknown) => void data.set(k, structuredClone(v)),
    delete: async (k: string) => data.delete(k),
    list: async <T,>(o: { limit?: number; start?: string } = {}) =>
      new Map([...data].filter(([k]) => o.start === undefined || k >= o.start).sort().slice(0, o.limit)) as Map<string, T>,
    getAlarm: async () => alarm.at,
    setAlarm: async (t: number) => void (alarm.at = t),
  };
  return { data, alarm, storage };
}

describe('RateLimiterObject storage hygiene (fake storage, fake clock)', () => {
  it('deletes the entries of buckets that are full again when its alarm fires, and re-arms for the rest', async () => {
    const { RateLimiterObject } = await import('../src/stores/durable-object.js');
    const { data, alarm, storage } = fakeStorage();
    let now = 1_790_000_000_000;
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      const obj = new RateLimiterObject({ storage });
      // 1 unit per µs: a cost of 1e6 units is one second of refill.
      const step = (key: string, costMs: number) =>
        obj
          .fetch(new Request('https://x/', { method: 'POST', body: JSON.stringify({ op: 'step', key, args: { limits: [{ costUnits: costMs * 1000, limitUnits: 1e9, refillUnitsPerUs: 1 }] } }) }))
          .then((r) => r.json());
      expect(await step('short', 1000)).toEqual({ allowed: true, debtUnits: [1_000_000], atUs: now * 1000 });
      expect(alarm.at).toBe(now + 1000);
      await step('long', 5000);
      for (let i = 0; i < 600; i++) await step(`bulk${i}`, 500); // more than one list() page
      expect(data.size).toBe(602);
      now += 1000;
      await obj.alarm();
      expect([...data.keys()]).toEqual(['long']);
      expect(alarm.at).toBe(now + 4000);
      now += 4000;
      await obj.alarm();
      expect(data.size).toBe(0);
      // A denied step writes nothing; a refund that empties the debt deletes the entry.
      await step('x', 1000);
      expect(await step('x', 1e6)).toEqual({ allowed: false, debtUnits: [1_000_000], atUs: now * 1000 });
      expect(await step('x', -5000)).toEqual({ allowed: true, debtUnits: [0], atUs: now * 1000 });
      expect(data.has('x')).toBe(false);
      const bad = await obj.fetch(new Request('https://x/', { method: 'POST', body: '{"op":"step","key":"","args":{}}' }));
      expect(bad.status).toBe(400);
      expect((await obj.fetch(new Request('https://x/', { method: 'POST', body: 'not json' }))).status).toBe(400);
    } finally {
      clock.mockRestore();
    }
  });
});

describe('RateLimiterObject reservations (fake storage, fake clock)', () => {
  it("keeps a bucket full again before its reservation's caller comes until then: its alarm does not take it, a refund does not, and a change in that ms finds the reservation (review 15, F2)", async () => {
    const { RateLimiterObject } = await import('../src/stores/durable-object.js');
    const { data, alarm, storage } = fakeStorage();
    let now = 1_790_000_000_000;
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      const obj = new RateLimiterObject({ storage });
      const fast = resolvePolicy('p', { capacity: 10, refillPerSecond: 1_000_000 }, { onStoreError: 'deny', timeoutMs: 1000 });
      const send = (op: string, body: object) => obj.fetch(new Request('https://x/', { method: 'POST', body: JSON.stringify({ op, key: 'k', ...body }) })).then((r) => r.json() as Promise<{ debtUnits: number[] }>);
      await send('step', { args: stepArgs(fast, 10, 0) });
      await send('step', { args: stepArgs(fast, 1, 5) });
      // Full 11 µs on; the reservation's caller comes at the next ms, and the entry stays until it is over.
      expect((data.get('k') as { fullAtMs: number }).fullAtMs).toBe(now + 2);
      now += 1;
      await obj.alarm();
      expect(data.has('k')).toBe(true);
      expect(alarm.at).toBe(now + 1);
      await send('step', { args: adjustArgs(fast, -1) });
      expect(data.has('k')).toBe(true);
      await send('override', { args: { base: baseNumbers(fast), limits: baseNumbers(resolvePolicy('p', { capacity: 5, refillPerSecond: 1 }, { onStoreError: 'deny', timeoutMs: 1000 })) } });
      const peek = await send('step', { args: stepArgs(fast, 0, 0) });
      // 11 tokens owed at 5 a second's scale (1e6 units a token), not a full bucket.
      expect(peek.debtUnits).toEqual([11_000_000]);
    } finally {
      clock.mockRestore();
    }
  });
});

describe('RateLimiterObject override records (fake storage, fake clock)', () => {
  it('keeps a record in the bucket\'s entry while it lives (the alarm leaves it), reset keeps it, and the entry goes when everything has ended', async () => {
    const { RateLimiterObject } = await import('../src/stores/durable-object.js');
    const { data, storage } = fakeStorage();
    let now = 1_790_000_000_000;
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      const obj = new RateLimiterObject({ storage });
      const call = (body: unknown) => obj.fetch(new Request('https://x/', { method: 'POST', body: JSON.stringify(body) }));
      // 1 unit per µs, a token of 1e6 units (1/s), capacity 10; a record of capacity 5 at 2/s for 10 s, and a block of 3 s.
      const base = [{ tokenUnits: 1_000_000, capacityUnits: 10_000_000, refillUnitsPerUs: 1 }];
      const five = [{ tokenUnits: 500_000, capacityUnits: 2_500_000, refillUnitsPerUs: 1 }];
      const args = (tokens: number) => ({ limits: [{ costUnits: tokens * 1_000_000, limitUnits: 10_000_000, refillUnitsPerUs: 1 }], base: { tokenUnits: [1_000_000], capacityUnits: [10_000_000], maxWaitMs: 0 } });
      expect(await (await call({ op: 'override', key: 'k', args: { base, limits: five, forMs: 10_000 } })).json()).toEqual({ atUs: now * 1000, after: { limits: five, untilUs: (now + 10_000) * 1000 } });
      expect(await (await call({ op: 'step', key: 'k', args: args(1) })).json()).toEqual({ allowed: true, debtUnits: [500_000], atUs: now * 1000, limits: five });
      await call({ op: 'override', key: 'k', args: { base, blockForMs: 3000 } });
      // The bucket is full in 0.5 s; the entry stays for the record, until its numbers end (10 s).
      now += 1000;
      await obj.alarm();
      expect(data.get('k')).toMatchObject({ fullAtMs: now - 1000 + 10_000, override: { limits: five } });
      await call({ op: 'reset', key: 'k' });
      expect(await (await call({ op: 'step', key: 'k', args: args(1) })).json()).toEqual({ allowed: false, debtUnits: [0], atUs: now * 1000, limits: five, blockedUntilUs: (now + 2000) * 1000 });
      now += 9000;
      await obj.alarm();
      expect(data.has('k')).toBe(false);
      expect(await (await call({ op: 'step', key: 'k', args: args(1) })).json()).toEqual({ allowed: true, debtUnits: [1_000_000], atUs: now * 1000 });
      // Numbers with no end keep the entry however long.
      await call({ op: 'override', key: 'n', args: { base, limits: five } });
      now += 90 * 24 * 3600 * 1000;
      await obj.alarm();
      expect(data.get('n')).toMatchObject({ override: { limits: five } });
      // The policy-wide change itself (numbers with its id, set by override) is kept as numbers with no end
      // are; a key's copy of it, installed by a step, goes with the full bucket (the next step installs it again).
      await call({ op: 'override', key: 'p*', args: { base, limits: five, policyId: 'w#p' } });
      // So is a change with an end, past it (review 9, F1: its version tells a node that read an older
      // change that this one was made and has ended).
      await call({ op: 'override', key: 'q*', args: { base, limits: five, policyId: 'w#q', forMs: 1000 } });
      expect(data.get('q*')).toMatchObject({ fullAtMs: Number.MAX_SAFE_INTEGER });
      expect(await (await call({ op: 'step', key: 'c', args: { ...args(1), policy: { id: 'w#p', limits: five } } })).json()).toEqual({ allowed: true, debtUnits: [500_000], atUs: now * 1000, limits: five });
      expect(data.get('c')).toMatchObject({ fullAtMs: now + 500, override: { limits: five, policyId: 'w#p' } });
      now += 90 * 24 * 3600 * 1000;
      await obj.alarm();
      expect(data.get('p*')).toMatchObject({ override: { limits: five, policyId: expect.stringMatching(/^\d+\.0\.0\.w#p$/) } });
      expect(data.get('q*')).toMatchObject({ override: { policyId: expect.stringMatching(/^\d+\.0\.0\.w#q$/) } });
      expect(data.has('c')).toBe(false);
      // A key's own numbers that end with the bucket still spent keep the entry until its next step;
      // reset, which takes the bucket, leaves it until their end (review 8, F2). 10 at 10/s for 0.5 s,
      // and 10 taken: 5 still spent at their end.
      const ten = [{ tokenUnits: 100_000, capacityUnits: 1_000_000, refillUnitsPerUs: 1 }];
      await call({ op: 'override', key: 'e', args: { base, limits: ten, forMs: 500 } });
      expect(await (await call({ op: 'step', key: 'e', args: args(10) })).json()).toMatchObject({ allowed: true, debtUnits: [1_000_000] });
      expect(data.get('e')).toMatchObject({ fullAtMs: Number.MAX_SAFE_INTEGER });
      await call({ op: 'reset', key: 'e' });
      expect(data.get('e')).toEqual({ fullAtMs: now + 500, override: { limits: ten, untilUs: (now + 500) * 1000 } });
      now += 31 * 24 * 3600 * 1000;
      await obj.alarm();
      expect(data.has('e')).toBe(false);
      // Bad arguments are refused, and change nothing.
      for (const bad of [{ base: [] }, { base, limits: [{ tokenUnits: 0, capacityUnits: 1, refillUnitsPerUs: 1 }] }, { base, forMs: -1, limits: five }, { base, blockForMs: 1.5 }]) {
        expect((await call({ op: 'override', key: 'n', args: bad })).status).toBe(400);
      }
      expect((await call({ op: 'step', key: 'n', args: { ...args(1), base: { tokenUnits: [1], capacityUnits: [], maxWaitMs: 0 } } })).status).toBe(400);
      expect(data.get('n')).toMatchObject({ override: { limits: five } });
    } finally {
      clock.mockRestore();
    }
  });
});

describe('RateLimiterObject: a key\'s copy of a policy-wide change or marker is held policyHoldMs', () => {
  it('with its bucket full, the entry stays policyHoldMs past the step that wrote it (a node with an older view could install the change again), and goes then', async () => {
    const { RateLimiterObject } = await import('../src/stores/durable-object.js');
    const { data, storage } = fakeStorage();
    let now = 1_790_000_000_000;
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      const obj = new RateLimiterObject({ storage });
      const call = (body: unknown) => obj.fetch(new Request('https://x/', { method: 'POST', body: JSON.stringify(body) }));
      const five = [{ tokenUnits: 500_000, capacityUnits: 2_500_000, refillUnitsPerUs: 1 }];
      const peek = { limits: [{ costUnits: 0, limitUnits: 10_000_000, refillUnitsPerUs: 1 }], base: { tokenUnits: [1_000_000], capacityUnits: [10_000_000], maxWaitMs: 0 } };
      // A peek installs the copy on a full bucket; then a step that read the revert (version 9) leaves the marker.
      await call({ op: 'step', key: 'k', args: { ...peek, policy: { id: '5.w#p', limits: five }, policyHoldMs: 5000 } });
      expect(data.get('k')).toMatchObject({ fullAtMs: now + 5000, override: { policyId: '5.w#p' } });
      now += 1000;
      await call({ op: 'step', key: 'k', args: { ...peek, policySeenUs: 9, policyHoldMs: 5000 } });
      expect(data.get('k')).toEqual({ fullAtMs: now + 5000, override: { policyId: '9.' } });
      now += 4999;
      await obj.alarm();
      expect(data.has('k')).toBe(true);
      now += 1;
      await obj.alarm();
      expect(data.has('k')).toBe(false);
      expect((await call({ op: 'step', key: 'k', args: { ...peek, policyHoldMs: -1 } })).status).toBe(400);
    } finally {
      clock.mockRestore();
    }
  });
});

describe('RateLimiterObject against the exact model (fake storage, Date.now() on a fake clock)', () => {
  /** A Store that sends each step to one object in-process, as the namespace would. */
  async function objectStore() {
    const { RateLimiterObject } = await import('../src/stores/durable-object.js');
    const { storage } = fakeStorage();
    const obj = new RateLimiterObject({ storage });
    const store: Store = {
      name: 'durable-object',
      step: async (key, args) => (await obj.fetch(new Request('https://x/', { method: 'POST', body: JSON.stringify({ op: 'step', key, args }) }))).json() as never,
      reset: async (key) => void (await obj.fetch(new Request('https://x/', { method: 'POST', body: JSON.stringify({ op: 'reset', key }) }))),
      override: async (key, args) => (await obj.fetch(new Request('https://x/', { method: 'POST', body: JSON.stringify({ op: 'override', key, args }) }))).json() as never,
      ping: async () => {},
    };
    return store;
  }

  it('takes, reservations, lease grants, refunds and several limits (per-limit costs, adjustments) match the model at every rate (1 ms clock)', async () => {
    let now = 1_790_000_000_000;
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      await fc.assert(
        fc.asyncProperty(fc.integer({ min: 1, max: 50 }), rateArb, takeOpsArb(40, 1000), async (capacity, { p, q }, ops) => {
          await checkTakesAgainstModel(await objectStore(), (dtUs) => (now += dtUs / 1000), capacity, p, q, ops);
        }),
        { numRuns: 150 },
      );
      await fc.assert(
        fc.asyncProperty(fc.integer({ min: 1, max: 50 }), rateArb, leaseOpsArb(1000), async (capacity, { p, q }, ops) => {
          await checkGrantsAgainstModel(await objectStore(), 'k', (dtUs) => (now += dtUs / 1000), capacity, p, q, ops);
        }),
        { numRuns: 150 },
      );
      await fc.assert(
        fc.asyncProperty(multiLimitsArb, multiOpsArb(1000), async (specs, ops) => {
          await checkMultiAgainstModel(await objectStore(), (dtUs) => (now += dtUs / 1000), specs, ops);
        }),
        { numRuns: 150 },
      );
    } finally {
      clock.mockRestore();
    }
  });

  it('override records: numbers set and cleared mid-debt, their end, blocks, a policy-wide change, grants and late refunds match the model (1 ms clock)', async () => {
    let now = 1_790_000_000_000;
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      await fc.assert(
        fc.asyncProperty(overrideCaseArb(1000, 30), async ({ base, ops }) => {
          await checkOverridesAgainstModel(await objectStore(), 'k', (dtUs) => (now += dtUs / 1000), base, ops);
        }),
        { numRuns: 200 },
      );
    } finally {
      clock.mockRestore();
    }
  });

  it('a full bucket at one instant admits exactly its capacity at 1e6/s', async () => {
    const now = 1_790_000_000_000;
    const clock = vi.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      const limiter = createLimiter({ store: await objectStore(), policies: { x: { capacity: 1000, refillPerSecond: 1e6 } } });
      let admitted = 0;
      while ((await limiter.take('x', 'k')).allowed) admitted++;
      expect(admitted).toBe(1000);
    } finally {
      clock.mockRestore();
    }
  });
});
