// Idempotency keys in Redis, against a real redis-server: the record is read and written by the same
// script call as the step (one atomic step), lives in the bucket key's hash slot, expires with the
// window by Redis's own clock, and a repeat (over TCP, and through the Upstash REST protocol with its
// auto-pipelining) answers the first decision.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisProcess } from '../scripts/lib/redis-server.js';
import { Redis as IORedis } from 'ioredis';
import { Redis as UpstashRedis } from '@upstash/redis';
import { createLimiter, IdempotencyConflictError } from '../src/index.js';
import { opKeyOf, redisStore } from '../src/stores/redis.js';
import { keySlot } from '../src/stores/redis-slot.js';
import { startUpstashLocal, type UpstashLocal } from '../scripts/upstash-local/server.js';
import { commandStats } from './support/redis-stats.js';

// A server of its own: the tests count script calls at Redis, which other files' traffic on the shared
// server would add to.
let redis: RedisProcess;
let io: IORedis;
let rest: UpstashLocal;
beforeAll(async () => {
  redis = await startRedis();
  io = new IORedis(redis.url);
  rest = await startUpstashLocal({ redisUrl: redis.url, token: 'idem-rest' });
});
afterAll(async () => {
  io.disconnect();
  await rest.close();
  await redis.stop();
});

const POLICIES = {
  api: { capacity: 3, refillPerSecond: 1 / 3600 },
  llm: { limits: { requests: { capacity: 5, refillPerSecond: 1 / 3600 }, tokens: { capacity: 1000, refillPerSecond: 1 / 3600 } } },
};

describe('idempotency keys in Redis', () => {
  it("an operation's record key is in its bucket key's hash slot, whatever braces the key holds", () => {
    for (const key of ['el:api:user-1', 'el:api:{tenant-7}:user-1', 'el:api:a}b', 'el:api:{}x}', 'el:api:{', '}{}', 'el:api:{a}{b}', 'ключ:}']) {
      expect(keySlot(opKeyOf(key, 'op-1')), key).toBe(keySlot(key));
      expect(opKeyOf(key, 'op-1')).not.toBe(opKeyOf(key, 'op-2'));
    }
  });

  for (const transport of ['ioredis over TCP', '@upstash/redis over the REST protocol'] as const) {
    it(`${transport}: a repeat answers the first decision in one script call and charges nothing; another request under the key is a conflict`, async () => {
      const client = transport === 'ioredis over TCP' ? io : new UpstashRedis({ url: rest.url, token: 'idem-rest', retry: false });
      const prefix = `idem:${Math.random().toString(36).slice(2, 8)}:`;
      const limiter = createLimiter({ store: redisStore({ client }), policies: POLICIES, prefix, idempotencyWindowMs: 60_000, policyRefreshMs: 60_000 });
      // This node's policy-wide reading (SPEC-31 §5: one script call per policyRefreshMs, counted in
      // test/runtime-limits.test.ts) and the scripts' loading come first, so what is counted below is
      // the decisions' own calls.
      await limiter.peek('llm', 'warm-up');
      await io.config('RESETSTAT');
      const first = await limiter.take('llm', 'org', { cost: { requests: 1, tokens: 700 }, idempotencyKey: 'op-1' });
      const again = await limiter.take('llm', 'org', { cost: { requests: 1, tokens: 700 }, idempotencyKey: 'op-1' });
      expect(again).toEqual({ ...first, repeated: true });
      const stats = await commandStats(io);
      expect([stats.evalsha?.calls ?? 0, stats.eval?.calls ?? 0]).toEqual([2, 0]); // one EVALSHA each
      expect((await limiter.peek('llm', 'org')).limits?.map((l) => l.remaining)).toEqual([4, 300]);
      // A refusal is recorded too, and repeats as that refusal.
      const refused = await limiter.take('llm', 'org', { cost: { tokens: 500 }, idempotencyKey: 'op-2' });
      expect(refused.allowed).toBe(false);
      expect(await limiter.take('llm', 'org', { cost: { tokens: 500 }, idempotencyKey: 'op-2' })).toEqual({ ...refused, repeated: true });
      // The same key for another request: nothing applied.
      await expect(limiter.take('llm', 'org', { cost: { tokens: 1 }, idempotencyKey: 'op-1' })).rejects.toBeInstanceOf(IdempotencyConflictError);
      await expect(limiter.adjust('llm', 'org', { tokens: -1 }, { idempotencyKey: 'op-1' })).rejects.toBeInstanceOf(IdempotencyConflictError);
      // A settlement with a key, retried: applied once.
      for (let i = 0; i < 3; i++) await limiter.adjust('llm', 'org', { tokens: -200 }, { idempotencyKey: 'settle-1' });
      expect((await limiter.peek('llm', 'org')).limits?.map((l) => l.remaining)).toEqual([4, 500]);
      // The record lives for the window, by Redis's clock.
      const ttl = await io.pttl(opKeyOf(`${prefix}llm:org`, 'op-1'));
      expect(ttl).toBeGreaterThan(55_000);
      expect(ttl).toBeLessThanOrEqual(60_000);
    });
  }

  it('after the window the key is forgotten and a take under it applies again', async () => {
    const limiter = createLimiter({ store: redisStore({ client: io }), policies: POLICIES, prefix: `idem-ttl:${Date.now()}:`, idempotencyWindowMs: 1000 });
    expect(await limiter.take('api', 'k', { idempotencyKey: 'x' })).toMatchObject({ allowed: true, remaining: 2 });
    expect(await limiter.take('api', 'k', { idempotencyKey: 'x' })).toMatchObject({ allowed: true, remaining: 2, repeated: true });
    await new Promise((r) => setTimeout(r, 1100));
    const later = await limiter.take('api', 'k', { idempotencyKey: 'x' });
    expect(later).toMatchObject({ allowed: true, remaining: 1 });
    expect(later.repeated).toBeUndefined();
  });

  it('a key whose record is read back differently (set by hand) is a store error, not an answer', async () => {
    const prefix = `idem-bad:${Date.now()}:`;
    const limiter = createLimiter({ store: redisStore({ client: io }), policies: POLICIES, prefix, circuitBreaker: false, onStoreError: 'deny' });
    await io.set(opKeyOf(`${prefix}api:k`, 'x'), 'not a record');
    expect(await limiter.take('api', 'k', { idempotencyKey: 'x' })).toMatchObject({ allowed: false, reason: 'store_error' });
  });
});
