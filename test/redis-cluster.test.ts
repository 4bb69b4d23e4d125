// Redis Cluster: the official `redis` package's cluster client (createCluster) and ioredis Cluster run
// the whole conformance suite against a real 3-master cluster; the script routes by its one key. Override
// records live in that key, so in the bucket's hash slot.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCluster } from 'redis';
import IORedis from 'ioredis';
import { startRedisCluster, type RedisCluster } from '../scripts/lib/redis-server.js';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { keySlot } from '../src/stores/redis-slot.js';
import { stepArgs } from '../src/core/gcra.js';
import { baseNumbers } from '../src/core/override.js';
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

describe('override records on Redis Cluster (issue 31)', () => {
  for (const kind of ['node-redis createCluster', 'ioredis Cluster'] as const) {
    it(`${kind}: a record lives in its bucket's key, so its hash slot, on every master; batched takes per slot obey it, a block refuses, a clear carries the debt back`, async () => {
      const c = await ready();
      const nr = kind === 'node-redis createCluster' ? createCluster({ rootNodes: c.nodes.map((x) => ({ url: x.url })) }) : undefined;
      const io = kind === 'ioredis Cluster' ? new IORedis.Cluster(c.nodes.map((x) => ({ host: '127.0.0.1', port: x.port }))) : undefined;
      await nr?.connect();
      const get = (key: string) => (nr ? nr.get(key) : io!.get(key));
      try {
        const store = redisStore({ client: (nr ?? io)! });
        const limiter = createLimiter({ store, policies: { p: { capacity: 5, refillPerSecond: 0.001 } }, prefix: `ovc${kind.length}:` });
        const policy = limiter.policy('p')!;
        const base = baseNumbers(policy);
        const two = [{ ...base[0]!, capacityUnits: 2 * base[0]!.tokenUnits }];
        const keys = Array.from({ length: 24 }, (_, i) => `ovc${kind.length}:p:k${i}`);
        const slots = new Set(keys.map((k) => keySlot(k)));
        expect(slots.size).toBeGreaterThan(12);
        if (nr) expect(new Set(keys.map((k) => String((nr.getSlotMaster(keySlot(k)) as { port: number }).port))).size).toBe(3);
        for (const k of keys) expect(await store.override!(k, { base, limits: two })).toMatchObject({ after: { limits: two } });
        // The record is the bucket key's own value: a full bucket and the record.
        for (const k of keys) expect(await get(k)).toBe(`|${two[0]!.tokenUnits},${two[0]!.capacityUnits},${two[0]!.refillUnitsPerUs}|||`);
        // Four takes per key, all at once: batched by slot, each key admits exactly its record's 2.
        const take = stepArgs(policy, 1, 0);
        const all = await Promise.all(keys.flatMap((k) => [0, 1, 2, 3].map(() => store.step(k, take).then((r) => [k, r] as const))));
        for (const k of keys) {
          const mine = all.filter(([key]) => key === k).map(([, r]) => r);
          expect(mine.filter((r) => r.allowed)).toHaveLength(2);
          expect(mine.every((r) => r.limits?.[0]?.capacityUnits === two[0]!.capacityUnits)).toBe(true);
        }
        // Blocks on half the keys: refused whatever the bucket, the others untouched.
        for (const k of keys.slice(0, 12)) await store.override!(k, { base, blockForMs: 60_000 });
        const blocked = await Promise.all(keys.map((k) => store.step(k, take)));
        expect(blocked.slice(0, 12).every((r) => !r.allowed && r.blockedUntilUs !== undefined)).toBe(true);
        expect(blocked.slice(12).every((r) => !r.allowed && r.blockedUntilUs === undefined)).toBe(true);
        // Cleared and unblocked: back to the base's 5, the 2 spent still spent.
        for (const k of keys) await store.override!(k, { base, limits: null, blockForMs: null });
        const back = await Promise.all(keys.flatMap((k) => [0, 1, 2, 3].map(() => store.step(k, take).then((r) => [k, r] as const))));
        for (const k of keys) expect(back.filter(([key, r]) => key === k && r.allowed)).toHaveLength(3);
        expect(back.every(([, r]) => r.limits === undefined)).toBe(true);
      } finally {
        await nr?.close();
        io?.disconnect();
      }
    });
  }
});
