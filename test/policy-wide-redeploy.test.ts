// A policy-wide change made while the policy had other limits, read by a node deployed with another set
// (a limit added, removed or reordered by a redeploy while the change is in force). The change's id
// names the limits its numbers were made for: it sets those the policy still has, by name, the others
// keep the policy's numbers, and one that names none of them is not applied, on every store alike.
// Before: on Redis the step was refused (the script checks the change has one set of numbers per limit),
// so every decision of the policy was a store error (all admitted with onStoreError 'allow', none with
// 'deny'); and by position, a removed limit's numbers went to another (a daily quota decided at a
// per-second limit's numbers) (cold reviews of 31).
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createLimiter, memoryStore, type Store } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { mongoStore } from '../src/stores/mongodb.js';
import { MingoCollection } from './support/mingo-collection.js';

const clients: IORedis[] = [];
afterAll(() => {
  for (const c of clients) c.disconnect();
});

const SLOW = 0.01;
const stores: [string, () => () => Store][] = [
  ['memory', () => {
    const s = memoryStore();
    return () => s;
  }],
  ['redis', () => () => {
    const client = new IORedis(inject('redisUrl'));
    clients.push(client);
    return redisStore({ client });
  }],
  ['mongodb (mingo)', () => {
    const collection = new MingoCollection();
    return () => mongoStore({ collection });
  }],
];

describe.each(stores)('a policy-wide change read by a node whose policy has other limits: %s', (_name, shared) => {
  const three = { limits: { burst: { capacity: 10, refillPerSecond: SLOW }, day: { capacity: 100, refill: '100/day' }, month: { capacity: 1000, refill: '1000/day' } } } as const;
  const change = { limits: { burst: { capacity: 3, refillPerSecond: SLOW }, day: { capacity: 50, refill: '50/day' }, month: { capacity: 200, refill: '200/day' } } } as const;

  it('reordered, one removed: each limit takes the numbers the change gave its name; no store error', async () => {
    const store = shared();
    const prefix = `pwr-${Math.random().toString(36).slice(2)}:`;
    const v1 = createLimiter({ store: store(), prefix, policies: { p: { ...three, onStoreError: 'allow' } } });
    await v1.setPolicyLimits('p', change);
    const v2 = createLimiter({ store: store(), prefix, policies: { p: { limits: { day: { capacity: 1000, refill: '1000/day' }, burst: { capacity: 10, refillPerSecond: SLOW } }, onStoreError: 'allow' } } });
    const ds = [];
    for (let i = 0; i < 5; i++) ds.push(await v2.take('p', 'k'));
    expect(ds.map((d) => [d.allowed, d.reason ?? null])).toEqual([[true, null], [true, null], [true, null], [false, null], [false, null]]);
    expect((await v2.peek('p', 'k')).limits?.map((l) => [l.name, l.limit])).toEqual([['day', 50], ['burst', 3]]);
    expect(await v2.getPolicyLimits('p')).toMatchObject({ source: 'policy-wide', limits: [{ name: 'day', capacity: 50 }, { name: 'burst', capacity: 3 }] });
    // Only the daily quota left: it is the change's daily quota, not the burst's numbers in its place.
    const v3 = createLimiter({ store: store(), prefix, policies: { p: { limits: { day: { capacity: 1000, refill: '1000/day' } }, onStoreError: 'allow' } } });
    const d = await v3.take('p', 'j');
    expect([d.allowed, d.reason ?? null, d.limit]).toEqual([true, null, 50]);
    await v1.close();
    await v2.close();
    await v3.close();
  });

  it('a change that names none of the policy\'s limits now is not applied: the policy\'s own numbers decide; no store error', async () => {
    const store = shared();
    const prefix = `pwr-${Math.random().toString(36).slice(2)}:`;
    const v1 = createLimiter({ store: store(), prefix, policies: { p: { capacity: 10, refillPerSecond: SLOW, onStoreError: 'deny' } } });
    await v1.setPolicyLimits('p', { capacity: 1, refillPerSecond: SLOW });
    expect((await v1.take('p', 'k0')).limit).toBe(1);
    const v2 = createLimiter({ store: store(), prefix, policies: { p: { limits: { burst: { capacity: 2, refillPerSecond: SLOW }, day: { capacity: 3, refill: '3/day' } }, onStoreError: 'deny' } } });
    const ds = [];
    for (let i = 0; i < 3; i++) ds.push(await v2.take('p', 'k'));
    expect(ds.map((d) => [d.allowed, d.reason ?? null, d.limit])).toEqual([[true, null, 2], [true, null, 2], [false, null, 2]]);
    expect(await v2.getPolicyLimits('p')).toMatchObject({ source: 'policy', limits: [{ name: 'burst', capacity: 2 }, { name: 'day', capacity: 3 }] });
    await v1.close();
    await v2.close();
  });
});
