// The upstash store for the Node and Lambda entries; its SDK is imported here and nowhere else.
import { redisStore } from '../../../src/stores/redis.js';
import type { AppConfig } from '../env.js';
import type { NodeStore, StoreClientOptions } from './types.js';

export async function upstashNodeStore(config: Extract<AppConfig['store'], { kind: 'upstash' }>, { timeoutMs }: StoreClientOptions): Promise<NodeStore> {
  const { Redis } = await import('@upstash/redis');
  // Every HTTP request (one per auto-pipelined batch) is aborted after timeoutMs, so a hung request
  // cannot hold a socket long after the limiter has answered.
  const client = new Redis({ url: config.url, token: config.token, retry: false, signal: () => AbortSignal.timeout(timeoutMs) });
  return { store: redisStore({ client, clientClock: config.clientClock }), close: async () => {} };
}
