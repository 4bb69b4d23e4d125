// Redis Cluster: the official `redis` package's cluster client (createCluster) and ioredis Cluster run
// the whole conformance suite against a real 3-master cluster; the script routes by its one key.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCluster } from 'redis';
import IORedis from 'ioredis';
import { startRedisCluster, type RedisCluster } from '../scripts/lib/redis-server.js';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
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
    const masters = new Set(keys.map((k) => String((client.getSlotMaster(slotOf(`el:p:${k}`)) as { port: number }).port)));
    expect(masters.size).toBe(3);
    for (const k of keys) expect((await limiter.take('p', k)).allowed).toBe(true);
    for (const m of client.masters) await client.nodeClient(m).then((n) => n.scriptFlush());
    for (const k of keys) expect((await limiter.take('p', k)).allowed).toBe(false);
  });
});

/** Redis Cluster's key slot: CRC16 (XMODEM) of the key (or its {hash tag}) mod 16384. */
function slotOf(key: string): number {
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of new TextEncoder().encode(key)) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}
