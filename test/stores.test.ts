// Runs the one conformance suite against every store.
import { inject } from 'vitest';
import { Redis as IORedis } from 'ioredis';
import { createClient } from 'redis';
import { storeConformance } from './support/conformance.js';
import { MingoCollection } from './support/mingo-collection.js';
import { memoryStore } from '../src/stores/memory.js';
import { redisStore } from '../src/stores/redis.js';
import { mongoStore } from '../src/stores/mongodb.js';
import { Redis as UpstashRedis } from '@upstash/redis';
import { startUpstashLocal, type UpstashLocal } from '../scripts/upstash-local/server.js';

storeConformance('memory', {
  clockResolutionMs: 0.001,
  create: async () => memoryStore(),
});

for (const batch of [true, false]) {
  let client: IORedis | undefined;
  storeConformance(`redis (ioredis, TCP${batch ? '' : ', batching off'})`, {
    clockResolutionMs: 0.001,
    async create() {
      client = new IORedis(inject('redisUrl'));
      return redisStore({ client, ...(batch ? {} : { batch: false }) });
    },
    expiryMs: async (key) => {
      const t = await client!.pttl(key);
      return t < 0 ? null : t;
    },
    close: async () => void client?.disconnect(),
  });
}

{
  let client: ReturnType<typeof createClient> | undefined;
  storeConformance('redis (node-redis, TCP)', {
    clockResolutionMs: 0.001,
    async create() {
      client = createClient({ url: inject('redisUrl') });
      await client.connect();
      return redisStore({ client });
    },
    expiryMs: async (key) => {
      const t = await client!.pTTL(key);
      return t < 0 ? null : t;
    },
    close: async () => void (await client?.close()),
  });
}

{
  const collection = new MingoCollection();
  storeConformance('mongodb (pipeline evaluated by mingo)', {
    clockResolutionMs: 1,
    create: async () => mongoStore({ collection }),
    expiryMs: async (key) => {
      const doc = collection.docs.find((d) => d._id === key);
      return doc?.expiresAt instanceof Date ? doc.expiresAt.getTime() - Date.now() : null;
    },
  });
}

{
  // @upstash/redis with its defaults (base64 responses, auto-pipelining) through the local REST server.
  let server: UpstashLocal | undefined;
  let admin: IORedis | undefined;
  storeConformance('redis (@upstash/redis over the Upstash REST protocol)', {
    clockResolutionMs: 0.001,
    async create() {
      server = await startUpstashLocal({ redisUrl: inject('redisUrl'), token: 'conformance' });
      admin = new IORedis(inject('redisUrl'));
      return redisStore({ client: new UpstashRedis({ url: server.url, token: 'conformance' }) });
    },
    expiryMs: async (key) => {
      const t = await admin!.pttl(key);
      return t < 0 ? null : t;
    },
    async close() {
      await server?.close();
      admin?.disconnect();
    },
  });
}
