// A key's admin call (clearLimits, block, setLimits, getLimits) carries its bucket under the node's view
// of the policy-wide change, as a step does, and that view must be as fresh as a decision's: a limiter
// that has not decided on the policy yet (a fresh Worker isolate, an admin-only server) held no view and
// carried the key to the policy's configured numbers: cleared during a change, the key refilled at the
// policy's rate until its next step (review 4, N2: 20 in 200 ms where 10.02 are allowed). Now it reads
// the change first. Two nodes, each with a store of its own on one redis-server (limiters sharing one
// Store object are told of a change at once).
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const clients: IORedis[] = [];
afterAll(() => {
  for (const c of clients) c.disconnect();
});

function node(prefix: string) {
  const client = new IORedis(inject('redisUrl'));
  clients.push(client);
  return createLimiter({ store: redisStore({ client }), prefix, policies: { p: { capacity: 10, refillPerSecond: 100 } } });
}

describe('a key’s admin call on a limiter that has not read the policy-wide change', () => {
  it('clearLimits reads the change first, and carries the key’s bucket to it: 0 more where the policy’s numbers would refill 10', async () => {
    const prefix = `adm-${Math.random().toString(36).slice(2)}:`;
    const a = node(prefix);
    // The change (10 per 1000 s) and the key's own numbers, the same, through A.
    await a.setPolicyLimits('p', { capacity: 10, refillPerSecond: 0.01 });
    await a.setLimits('p', 'k', { capacity: 10, refillPerSecond: 0.01 });
    let taken = 0;
    for (let i = 0; i < 10; i++) if ((await a.take('p', 'k')).allowed) taken++;
    expect(taken).toBe(10);
    // B has made no decision on the policy: its clearLimits reads the change, and says the key is under it.
    const b = node(prefix);
    const cleared = await b.clearLimits('p', 'k');
    expect(cleared).toMatchObject({ source: 'policy-wide', limits: [expect.objectContaining({ capacity: 10, refillPerSecond: expect.closeTo(0.01, 9) })] });
    // 200 ms: the policy's own numbers would have refilled all 10.
    await sleep(200);
    let more = 0;
    for (let i = 0; i < 10; i++) if ((await b.take('p', 'k')).allowed) more++;
    expect(more).toBe(0);
  });

  it('block and unblock, and getLimits, after the key’s own numbers ended: read the change first', async () => {
    const prefix = `adm-${Math.random().toString(36).slice(2)}:`;
    const a = node(prefix);
    await a.setPolicyLimits('p', { capacity: 10, refillPerSecond: 0.01 });
    await a.setLimits('p', 'k', { capacity: 10, refillPerSecond: 0.01 }, { expiresInMs: 100 });
    let taken = 0;
    for (let i = 0; i < 10; i++) if ((await a.take('p', 'k')).allowed) taken++;
    expect(taken).toBe(10);
    await sleep(150);
    const b = node(prefix);
    expect(await b.getLimits('p', 'k')).toMatchObject({ source: 'policy-wide' });
    await b.block('p', 'k', { forMs: 1 });
    await b.unblock('p', 'k');
    await sleep(200);
    let more = 0;
    for (let i = 0; i < 10; i++) if ((await b.take('p', 'k')).allowed) more++;
    expect(more).toBe(0);
  });
});
