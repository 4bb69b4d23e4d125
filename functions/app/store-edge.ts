// Store factory for Cloudflare Workers: the stores that run there (memory, Upstash over HTTP, Durable Objects).
// It never imports a TCP Redis client or the MongoDB driver, so a Worker bundle holds neither.
import { Redis } from '@upstash/redis/cloudflare';
import { ConfigError } from '../../src/errors.js';
import type { Store } from '../../src/store.js';
import { memoryStore } from '../../src/stores/memory.js';
import { adaptScriptClient } from '../../src/stores/redis-client.js';
import { createRedisStore } from '../../src/stores/redis-store.js';
import { durableObjectStore, type DurableObjectNamespaceLike } from '../../src/stores/durable-object.js';
import type { AppConfig } from './env.js';

/** `timeoutMs`: the longest store call a policy allows (storeTimeoutMs(config)); `env`: the Worker's bindings. */
export function createEdgeStore(config: AppConfig['store'], { timeoutMs, env = {} }: { timeoutMs: number; env?: Record<string, unknown> }): Store {
  switch (config.kind) {
    case 'memory':
      return memoryStore();
    case 'upstash':
      // retry: false: the limiter's timeout and fail mode decide what an outage means, not client retries.
      // signal: each HTTP request is aborted after timeoutMs, so it cannot outlive the decision it served.
      // redisStore's store, given only the adapter an @upstash/redis client needs (not the TCP clients').
      return createRedisStore(
        { client: new Redis({ url: config.url, token: config.token, retry: false, signal: () => AbortSignal.timeout(timeoutMs) }), clientClock: config.clientClock },
        adaptScriptClient,
      );
    case 'durable-object': {
      const namespace = env.LIMITER_DO as DurableObjectNamespaceLike | undefined;
      if (!namespace || typeof namespace.idFromName !== 'function') {
        throw new ConfigError('LIMITER_DO', 'LIMITER_STORE=durable-object needs the LIMITER_DO Durable Object binding of RateLimiterObject (see wrangler.toml)');
      }
      return durableObjectStore({ namespace, ...(config.shards === undefined ? {} : { shards: config.shards }) });
    }
    default:
      throw new ConfigError('LIMITER_STORE', `"${config.kind}" needs a TCP connection and is not available on Workers; use upstash or memory`);
  }
}
