// Nodes with different policyRefreshMs or timeoutMs, on stores whose keys expire (Redis PX, the Durable
// Object's alarm). A key's copy of a policy-wide change was held the writing node's policyRefreshMs +
// timeoutMs + 50 ms, so once a node that reads often had moved a key to a change and the copy had gone
// with its full bucket, a node that reads less often (still holding the older view, within its own
// policyRefreshMs) decided the key under the policy's numbers again: a burst of 100 where the change
// allows 2 (review of 31, P1). The hold is now the same on every node: the longest any node may read late.
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createLimiter, type Store } from '../src/index.js';
import { POLICY_HOLD_MS } from '../src/limiter/policy-wide.js';
import { redisStore } from '../src/stores/redis.js';
import { startDurableObjects, type WorkerdDurableObjects } from '../scripts/lib/workerd-durable-object.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const clients: IORedis[] = [];
let workerd: Promise<WorkerdDurableObjects> | undefined;
afterAll(async () => {
  for (const c of clients) c.disconnect();
  await (await workerd)?.dispose();
});

const stores: [string, () => Promise<Store>][] = [
  ['redis', async () => {
    const client = new IORedis(inject('redisUrl'));
    clients.push(client);
    return redisStore({ client });
  }],
  ['durable object (in workerd)', async () => (await (workerd ??= startDurableObjects())).store()],
];

describe('the hold of a key’s copy of a policy-wide change', () => {
  it('is one value, whatever the node’s settings: the longest policyRefreshMs and timeoutMs, + 50 ms', () => {
    expect(POLICY_HOLD_MS).toBe(60_000 + 60_000 + 50);
  });
});

describe.each(stores)('nodes that read the policy-wide change at different rates: %s', (_name, storeOf) => {
  it('a node that reads less often cannot move a key back to the policy’s numbers once the writer’s own hold has passed', async () => {
    const prefix = `hold-${Math.random().toString(36).slice(2)}:`;
    // Two nodes, each with a store of its own on the one server (limiters sharing one Store object are
    // told of a change at once). The policy: 100 at one an hour. A reads every 100 ms with timeoutMs 100
    // (its own hold was 250 ms); B every 60 s, with timeoutMs 2000 (so that on a busy machine none of its
    // takes is decided by the fail mode, under the policy's numbers).
    const node = async (policyRefreshMs: number, timeoutMs: number) => createLimiter({ store: await storeOf(), prefix, policyRefreshMs, policies: { p: { capacity: 100, refillPerSecond: 1 / 3600, timeoutMs } } });
    const a = await node(100, 100);
    const b = await node(60_000, 2000);
    // B reads the policy's record (no change), then A sets one: 2 at 10 a second.
    expect((await b.take('p', 'warm')).limit).toBe(100);
    await a.setPolicyLimits('p', { capacity: 2, refillPerSecond: 10 });
    const byA = [];
    for (let i = 0; i < 3; i++) byA.push(await a.take('p', 'k'));
    expect(byA.map((d) => [d.allowed, d.limit])).toEqual([[true, 2], [true, 2], [false, 2]]);
    // Past A's own hold and Redis's shortest expiry (1 s): the bucket is full again under the change
    // (in 200 ms), and would have gone with its copy.
    await sleep(1300);
    // B still holds its reading from before the change: it decides under the key's copy, newer than it.
    const byB = [];
    const t0 = performance.now();
    for (let i = 0; i < 101; i++) byB.push(await b.take('p', 'k'));
    const elapsedMs = performance.now() - t0;
    expect(new Set(byB.map((d) => d.limit))).toEqual(new Set([2]));
    // 2, and one each 100 ms while B takes (under the policy's numbers, 100 at once).
    expect(byB.filter((d) => d.allowed).length).toBeLessThanOrEqual(2 + Math.ceil(elapsedMs / 100) + 1);
  });
});
