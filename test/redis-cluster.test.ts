// Redis Cluster: the official `redis` package's cluster client (createCluster) and ioredis Cluster run
// the whole conformance suite against a real 3-master cluster; the script routes by its one key.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCluster } from 'redis';
import IORedis from 'ioredis';
import { startRedisCluster, type RedisCluster } from '../scripts/lib/redis-server.js';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { keySlot } from '../src/stores/redis-slot.js';
import { storeConformance } from './support/conformance.js';

let cluster: RedisCluster | undefined;
let starting: Promise<RedisCluster> | undefined;
const ready = () => (starting ??= startRedisCluster(3).then((c) => (cluster = c)));
afterAll(async () => {
  await cluster?.stop();
});

type NodeRedisCluster = ReturnType<typeof createCluster>;

function nodeRedisHarness() {
  let client: NodeRedisCluster | undefined;
  return {
    clockResolutionMs: 0.001,
    async create() {
      const c = await ready();
      client = createCluster({ rootNodes: c.nodes.map((n) => ({ url: n.url })) });
      await client.connect();
      return redisStore({ client });
    },
    expiryMs: async (key: string) => {
      const t = await client!.pTTL(key);
      return t < 0 ? null : t;
    },
    async close() {
      await client?.close();
    },
  };
}

storeConformance('redis (node-redis createCluster, 3 masters)', nodeRedisHarness());

{
  let client: InstanceType<typeof IORedis.Cluster> | undefined;
  storeConformance('redis (ioredis Cluster, 3 masters)', {
    clockResolutionMs: 0.001,
    async create() {
      const c = await ready();
      client = new IORedis.Cluster(c.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })));
      return redisStore({ client });
    },
    expiryMs: async (key) => {
      const t = await client!.pttl(key);
      return t < 0 ? null : t;
    },
    async close() {
      client?.disconnect();
    },
  });
}

describe('node-redis cluster routing', () => {
  let client: NodeRedisCluster;
  beforeAll(async () => {
    const c = await ready();
    client = createCluster({ rootNodes: c.nodes.map((n) => ({ url: n.url })) });
    await client.connect();
  }, 60_000);
  afterAll(async () => {
    await client?.close();
  });

  it('keys in every slot range decide on their own master, and NOSCRIPT after SCRIPT FLUSH is recovered on that node', async () => {
    const limiter = createLimiter({ store: redisStore({ client }), policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    const keys = Array.from({ length: 30 }, (_, i) => `route-${i}`);
    const masters = new Set(keys.map((k) => String((client.getSlotMaster(keySlot(`el:p:${k}`)) as { port: number }).port)));
    expect(masters.size).toBe(3);
    for (const k of keys) expect((await limiter.take('p', k)).allowed).toBe(true);
    for (const m of client.masters) await client.nodeClient(m).then((n) => n.scriptFlush());
    for (const k of keys) expect((await limiter.take('p', k)).allowed).toBe(false);
  });

  it('concurrent decisions across all slots are batched per slot, never across slots (no CROSSSLOT)', async () => {
    const limiter = createLimiter({ store: redisStore({ client }), policies: { p: { capacity: 2, refillPerSecond: 0.001 } }, prefix: 'cs:' });
    // 3 takes each on 40 buckets, all at once: same-slot takes share a call, and each bucket admits exactly 2.
    const keys = Array.from({ length: 40 }, (_, i) => `b${i}`);
    const all = await Promise.all(keys.flatMap((k) => [0, 1, 2].map(() => limiter.take('p', k).then((d) => [k, d] as const))));
    expect(all.filter(([, d]) => d.reason === 'store_error')).toEqual([]);
    for (const k of keys) expect(all.filter(([key, d]) => key === k && d.allowed)).toHaveLength(2);
  });
});
