// `npm start` on SIGTERM gives leased tokens back before it exits: the process is the real Node entry
// (functions/node.ts) on the shared redis-server, and the bucket is read from Redis after it has exited.
import { Redis as IORedis } from 'ioredis';
import { expect, it, inject } from 'vitest';
import { createLimiter } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis.js';
import { startNodeServer } from '../support/node-server.js';

it('SIGTERM returns the unused tokens of a lease to the store (89 -> 98 on a bucket of 100)', async () => {
  // A token per 1000 s: no refill within the test, so every count is exact. Leases of 10.
  const policies = { leased: { capacity: 100, refillPerSecond: 0.001, lease: { tokens: 10, maxAgeMs: 60_000 } } };
  const server = await startNodeServer({ REDIS_URL: inject('redisUrl'), PERMIT_TOKENS: 'shutdown-token', LIMITER_POLICIES: JSON.stringify(policies) });
  const key = `shutdown-${Date.now()}`;
  const io = new IORedis(inject('redisUrl'));
  const reader = createLimiter({ store: redisStore({ client: io }), policies });
  try {
    const post = async () => {
      const res = await fetch(`${server.url}/v1/permits`, {
        method: 'POST',
        headers: { Authorization: 'Bearer shutdown-token', 'Content-Type': 'application/json' },
        body: JSON.stringify({ policy: 'leased', key }),
      });
      return (await res.json()) as { allowed: boolean; remaining: number };
    };
    expect(await post()).toMatchObject({ allowed: true, remaining: 99 }); // the key's first take: plain
    expect(await post()).toMatchObject({ allowed: true, remaining: 9 }); // a grant of 10, one used
    const health = (await (await fetch(`${server.url}/healthz`)).json()) as { leases: { keys: number; tokens: number } };
    expect(health.leases).toEqual({ keys: 1, tokens: 9 });
    expect((await reader.peek('leased', key)).remaining).toBe(89);
    expect(await server.stop()).toBe(0);
    expect(server.output()).toContain('"msg":"shutting down"');
    // The 9 unused tokens are back (less the refill since the grant, a few thousandths of a token).
    expect((await reader.peek('leased', key)).remaining).toBe(98);
  } finally {
    await server.stop();
    io.disconnect();
  }
});
