// Store factory for Node and Lambda: every store kind, each SDK imported only when chosen. A build
// that needs one kind imports its file from ./node-stores/ directly (see functions/lambda/).
import { ConfigError } from '../../src/errors.js';
import type { AppConfig } from './env.js';
import type { NodeStore, StoreClientOptions } from './node-stores/types.js';

export type { NodeStore, StoreClientOptions };

export async function createNodeStore(config: AppConfig['store'], options: StoreClientOptions): Promise<NodeStore> {
  switch (config.kind) {
    case 'memory':
      return (await import('./node-stores/memory.js')).memoryNodeStore(config, options);
    case 'upstash':
      return (await import('./node-stores/upstash.js')).upstashNodeStore(config, options);
    case 'redis':
      return (await import('./node-stores/redis.js')).redisNodeStore(config, options);
    case 'mongodb':
      return (await import('./node-stores/mongodb.js')).mongoNodeStore(config, options);
    case 'durable-object':
      throw new ConfigError('LIMITER_STORE', 'durable-object runs only on Cloudflare Workers; on Node and Lambda use redis, upstash, mongodb or memory');
  }
}
