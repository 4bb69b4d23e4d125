// Redis store (the edge-limiter/redis entry): one EVALSHA per decision, decisions gathered into batches
// (./redis-store.ts), with an @upstash/redis client (HTTP) or a TCP client (ioredis, or the official
// `redis` package), taken structurally (./redis-client.ts): no Redis SDK is imported here.
import type { Store } from '../store.js';
import { adapt } from './redis-client.js';
import { createRedisStore, type RedisStoreOptions } from './redis-store.js';

export type { RedisClientLike, RedisScriptClient } from './redis-client.js';
export { opKeyOf } from './redis-reply.js';
export type { RedisStoreOptions } from './redis-store.js';

/** A store in Redis (over TCP or Upstash's HTTP): each decision is one Lua script run by EVALSHA, timed by Redis TIME; decisions of one turn are batched into one call. */
export function redisStore(options: RedisStoreOptions): Store {
  return createRedisStore(options, adapt);
}
