// Store factory for Node and Lambda: every store, each SDK imported only when chosen.
import type { Store } from '../store.js';
import { memoryStore } from '../stores/memory.js';
import { redisStore } from '../stores/redis.js';
import { mongoStore, type BucketDocument } from '../stores/mongodb.js';
import type { AppConfig } from './env.js';

export interface NodeStore {
  store: Store;
  /** Closes connections (for a clean shutdown). */
  close(): Promise<void>;
}

export interface StoreClientOptions {
  /** The longest store call a policy allows (storeTimeoutMs(config)): each client bounds a command by it. */
  timeoutMs: number;
}

export async function createNodeStore(config: AppConfig['store'], { timeoutMs }: StoreClientOptions): Promise<NodeStore> {
  switch (config.kind) {
    case 'memory':
      return { store: memoryStore(), close: async () => {} };
    case 'upstash': {
      const { Redis } = await import('@upstash/redis');
      // Every HTTP request (one per auto-pipelined batch) is aborted after timeoutMs, so a hung request
      // cannot hold a socket long after the limiter has answered.
      const client = new Redis({ url: config.url, token: config.token, retry: false, signal: () => AbortSignal.timeout(timeoutMs) });
      return { store: redisStore({ client, clientClock: config.clientClock }), close: async () => {} };
    }
    case 'redis': {
      const { Redis } = await import('ioredis');
      // No offline queue: while Redis is down, commands fail at once instead of piling up in memory.
      const client = new Redis(config.url, {
        enableOfflineQueue: false,
        maxRetriesPerRequest: 0,
        connectTimeout: 2000,
        // A command the limiter has given up on is also failed by the client, freeing its reply slot.
        commandTimeout: timeoutMs,
        // Reconnect quickly (every 50-250 ms) so a restarted Redis is used again within a second.
        retryStrategy: (times) => Math.min(times * 50, 250),
      });
      client.on('error', () => {}); // reconnects by itself; each failed decision reports through the limiter
      // Without an offline queue, commands sent before the connection is up fail at once: wait for it
      // (a Lambda cold start would otherwise answer its first requests with store errors). A Redis that
      // is down now is not fatal; decisions follow the fail mode until it is back.
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 2000);
        client.once('ready', () => {
          clearTimeout(t);
          resolve();
        });
      });
      return { store: redisStore({ client, clientClock: config.clientClock }), close: async () => void client.disconnect() };
    }
    case 'mongodb': {
      const { MongoClient } = await import('mongodb');
      // Server side, each operation carries maxTimeMS (the call's timeout); client side, a socket that
      // stops answering and a wait for a pooled connection are bounded too.
      const client = new MongoClient(config.uri, {
        serverSelectionTimeoutMS: 2000,
        maxPoolSize: 20,
        socketTimeoutMS: timeoutMs + 1000,
        waitQueueTimeoutMS: timeoutMs,
      });
      const store = mongoStore({ collection: client.db(config.db).collection<BucketDocument>(config.collection), maxTimeMS: timeoutMs });
      await store.ensureIndexes().catch(() => {
        // Not fatal at start: decisions do not depend on the TTL index, only disk usage does.
      });
      return { store, close: () => client.close() };
    }
  }
}
