// Two servers settling the same charge at once (issue 32, item 2): two limiters, each with its own
// connection to one real redis-server (as two Node servers would be), settle one charge 40 times
// concurrently: exactly one settlement is applied, every other answers it as repeated, and the bucket
// got back exactly what the charge took beyond the actual cost.
import { inject } from 'vitest';
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';

const clients: IORedis[] = [];
afterAll(() => {
  for (const c of clients) c.disconnect();
});

describe('two servers on one redis-server settle one charge', () => {
  it('40 concurrent settlements from two connections apply once', async () => {
    const prefix = `two:${Math.random().toString(36).slice(2, 8)}:`;
    const [a, b] = [0, 1].map(() => {
      const client = new IORedis(inject('redisUrl'));
      clients.push(client);
      return createLimiter({ store: redisStore({ client }), prefix, policies: { llm: { capacity: 100, refillPerSecond: 1 / 3600 } } });
    });
    expect((await a!.take('llm', 'org', { cost: 60, idempotencyKey: 'job' })).remaining).toBe(40);
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a! : b!).settle('llm', 'org', { charge: 'job', cost: 25 })));
    expect(answers.filter((d) => !d.repeated)).toHaveLength(1);
    expect(new Set(answers.map((d) => d.remaining))).toEqual(new Set([75]));
    expect((await b!.peek('llm', 'org')).remaining).toBe(75);
  });
});
