// The Redis store through @upstash/redis and the local REST server: NOSCRIPT recovery and round trips,
// counted at Redis (INFO commandstats) and at the HTTP server.
import { describe, expect, it } from 'vitest';
import { Redis as IORedis } from 'ioredis';
import { Redis as UpstashRedis } from '@upstash/redis';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { startUpstashLocal, type UpstashLocal } from '../scripts/upstash-local/server.js';
import { startRedis } from '../scripts/lib/redis-server.js';
import { commandStats } from './support/redis-stats.js';
import { stepArgs } from '../src/core/gcra.js';
import { baseNumbers } from '../src/core/override.js';

/** A fresh redis-server with the local Upstash REST server in front, and an admin connection to it. */
async function withUpstash(fn: (stack: { server: UpstashLocal; admin: IORedis }) => Promise<void>): Promise<void> {
  const redis = await startRedis();
  const server = await startUpstashLocal({ redisUrl: redis.url, token: 't' });
  const admin = new IORedis(redis.url);
  try {
    await fn({ server, admin });
  } finally {
    admin.disconnect();
    await server.close();
    await redis.stop();
  }
}

describe('redis store over Upstash REST', () => {
  it('steady state: one HTTP request and one EVALSHA per decision; after SCRIPT FLUSH, one EVAL and back to EVALSHA', async () => {
    await withUpstash(async ({ server, admin }) => {
      const limiter = createLimiter({ store: redisStore({ client: new UpstashRedis({ url: server.url, token: 't' }) }), policies: { p: { capacity: 50, refillPerSecond: 1 } } });
      await limiter.take('p', 'warm');
      await admin.config('RESETSTAT');
      const before = server.stats.requests;
      for (let i = 0; i < 10; i++) expect((await limiter.take('p', `k${i % 2}`)).allowed).toBe(true);
      expect(server.stats.requests - before).toBe(10);
      let s = await commandStats(admin);
      expect(s.evalsha).toEqual({ calls: 10, failed: 0, rejected: 0 });
      expect(s.eval).toBeUndefined();

      await admin.script('FLUSH');
      await admin.config('RESETSTAT');
      const d = await limiter.take('p', 'after-flush');
      expect(d.allowed).toBe(true);
      expect(d.reason).toBeUndefined();
      s = await commandStats(admin);
      expect(s.evalsha).toEqual({ calls: 1, failed: 1, rejected: 0 });
      expect(s.eval!.calls).toBe(1);
      await admin.config('RESETSTAT');
      const mid = server.stats.requests;
      for (let i = 0; i < 3; i++) await limiter.take('p', 'after-flush');
      s = await commandStats(admin);
      expect(s.evalsha).toEqual({ calls: 3, failed: 0, rejected: 0 });
      expect(s.eval).toBeUndefined();
      expect(server.stats.requests - mid).toBe(3);
    });
  });

  it('batching: 16 concurrent decisions on 16 buckets are one HTTP request and one billed command', async () => {
    await withUpstash(async ({ server, admin }) => {
      const limiter = createLimiter({ store: redisStore({ client: new UpstashRedis({ url: server.url, token: 't' }) }), policies: { p: { capacity: 3, refillPerSecond: 1 } } });
      await Promise.all(Array.from({ length: 3 }, (_, i) => limiter.take('p', `warm${i}`))); // one batch of 3: loads the batch script
      await admin.config('RESETSTAT');
      const before = server.stats.requests;
      const all = await Promise.all(Array.from({ length: 16 }, (_, i) => limiter.take('p', `user-${i}`)));
      expect(all.every((d) => d.allowed && d.remaining === 2)).toBe(true);
      expect(server.stats.requests - before).toBe(1);
      expect((await commandStats(admin)).evalsha).toEqual({ calls: 1, failed: 0, rejected: 0 });
    });
  });

  it('concurrent decisions are auto-pipelined into fewer HTTP requests and stay exact', async () => {
    await withUpstash(async ({ server }) => {
      const limiter = createLimiter({ store: redisStore({ client: new UpstashRedis({ url: server.url, token: 't' }) }), policies: { p: { capacity: 10, refillPerSecond: 1 } } });
      const before = server.stats.requests;
      const all = await Promise.all(Array.from({ length: 40 }, () => limiter.take('p', 'hot')));
      expect(all.filter((d) => d.allowed)).toHaveLength(10);
      expect(server.stats.requests - before).toBeLessThan(40);
    });
  });
});

describe('override records over Upstash REST (issue 31)', () => {
  it('override(), then concurrent decisions auto-pipelined into one batch obey the record; a block refuses; reset keeps the record; a clear carries back; values as over TCP', async () => {
    await withUpstash(async ({ server, admin }) => {
      const store = redisStore({ client: new UpstashRedis({ url: server.url, token: 't' }) });
      const limiter = createLimiter({ store, policies: { p: { capacity: 10, refillPerSecond: 0.001 } }, prefix: 'up:' });
      const policy = limiter.policy('p')!;
      const base = baseNumbers(policy);
      const three = [{ ...base[0]!, capacityUnits: 3 * base[0]!.tokenUnits }];
      const keys = ['up:p:a', 'up:p:b', 'up:p:c'];
      for (const k of keys) expect((await store.override!(k, { base, limits: three })).after).toEqual({ limits: three });
      expect(await store.override!(keys[0]!, { base })).toMatchObject({ before: { limits: three }, after: { limits: three } });
      const take = stepArgs(policy, 1, 0);
      await Promise.all(['w1', 'w2'].map((k) => store.step(`up:p:${k}`, take))); // loads the batch script
      const before = server.stats.requests;
      const all = await Promise.all(keys.flatMap((k) => Array.from({ length: 5 }, () => store.step(k, take).then((r) => [k, r] as const))));
      // 15 decisions in one request (one batch script call).
      expect(server.stats.requests - before).toBe(1);
      for (const k of keys) expect(all.filter(([key, r]) => key === k && r.allowed)).toHaveLength(3);
      expect(all.every(([, r]) => r.limits?.[0]?.capacityUnits === three[0]!.capacityUnits)).toBe(true);
      // The value is the one format both paths write: the bucket, then the record.
      expect(await admin.get(keys[0]!)).toMatch(new RegExp(`^${3 * three[0]!.tokenUnits}:\\d+\\|${three[0]!.tokenUnits},${three[0]!.capacityUnits},${three[0]!.refillUnitsPerUs}\\|\\|\\|$`));
      await store.override!(keys[1]!, { base, blockForMs: 60_000 });
      const blocked = await store.step(keys[1]!, take);
      expect(blocked.allowed).toBe(false);
      expect(blocked.blockedUntilUs! - blocked.atUs!).toBeLessThanOrEqual(60_000_000);
      expect(blocked.blockedUntilUs! - blocked.atUs!).toBeGreaterThan(50_000_000);
      // reset forgets the bucket, keeps the record (and its block).
      await store.reset(keys[2]!);
      expect(await admin.get(keys[2]!)).toMatch(/^\|\d+,\d+,\d+\|\|\|$/);
      expect((await store.step(keys[2]!, take)).allowed).toBe(true);
      await store.override!(keys[0]!, { base, limits: null });
      const back = await Promise.all(Array.from({ length: 10 }, () => store.step(keys[0]!, take)));
      expect(back.filter((r) => r.allowed)).toHaveLength(7);
      expect(await admin.get(keys[0]!)).toMatch(/^\d+:\d+$/);
    });
  });
});
