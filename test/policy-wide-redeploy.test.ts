// A policy-wide change made while the policy had one number of limits, read by a node deployed with
// another (a limit added or removed by a redeploy while the change is in force). The change applies to
// the limits by position, the others keep the policy's numbers, on every store alike. On Redis the step
// was refused (the script checks the change has one set of numbers per limit), so every decision of the
// policy was a store error: all admitted with onStoreError 'allow', none with 'deny' (cold review of 31).
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

describe.each(stores)('a policy-wide change read by a node whose policy has another number of limits: %s', (_name, shared) => {
  it('one limit then two: the change decides the first limit, the second keeps its numbers; no store error', async () => {
    const store = shared();
    const prefix = `pwr-${Math.random().toString(36).slice(2)}:`;
    const v1 = createLimiter({ store: store(), prefix, policies: { p: { capacity: 10, refillPerSecond: SLOW, onStoreError: 'allow' } } });
    await v1.setPolicyLimits('p', { capacity: 1, refillPerSecond: SLOW });
    const v2 = createLimiter({ store: store(), prefix, policies: { p: { limits: { burst: { capacity: 10, refillPerSecond: SLOW }, day: { capacity: 3, refill: '3/day' } }, onStoreError: 'allow' } } });
    const ds = [];
    for (let i = 0; i < 5; i++) ds.push(await v2.take('p', 'k'));
    expect(ds.map((d) => [d.allowed, d.reason ?? null, d.limit])).toEqual([[true, null, 1], [false, null, 1], [false, null, 1], [false, null, 1], [false, null, 1]]);
    expect((await v2.peek('p', 'k')).limits?.map((l) => l.limit)).toEqual([1, 3]);
    expect(await v2.getPolicyLimits('p')).toMatchObject({ source: 'policy-wide', limits: [{ name: 'burst', capacity: 1 }, { name: 'day', capacity: 3 }] });
    await v1.close();
    await v2.close();
  });

  it('two limits then one: the change\'s first numbers decide; no store error', async () => {
    const store = shared();
    const prefix = `pwr-${Math.random().toString(36).slice(2)}:`;
    const v1 = createLimiter({ store: store(), prefix, policies: { p: { limits: { burst: { capacity: 10, refillPerSecond: SLOW }, day: { capacity: 100, refill: '100/day' } }, onStoreError: 'deny' } } });
    await v1.setPolicyLimits('p', { limits: { burst: { capacity: 2, refillPerSecond: SLOW }, day: { capacity: 50, refill: '50/day' } } });
    const v2 = createLimiter({ store: store(), prefix, policies: { p: { capacity: 10, refillPerSecond: SLOW, onStoreError: 'deny' } } });
    const ds = [];
    for (let i = 0; i < 4; i++) ds.push(await v2.take('p', 'k'));
    expect(ds.map((d) => [d.allowed, d.reason ?? null, d.limit])).toEqual([[true, null, 2], [true, null, 2], [false, null, 2], [false, null, 2]]);
    await v1.close();
    await v2.close();
  });
});
