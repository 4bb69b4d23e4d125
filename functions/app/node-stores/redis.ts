// The redis store for the Node and Lambda entries; its SDK is imported here and nowhere else.
import { redisStore } from '../../../src/stores/redis.js';
import type { AppConfig } from '../env.js';
import type { NodeStore, StoreClientOptions } from './types.js';

export async function redisNodeStore(config: Extract<AppConfig['store'], { kind: 'redis' }>, { timeoutMs }: StoreClientOptions): Promise<NodeStore> {
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
