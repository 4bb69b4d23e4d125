// Upstash Redis over HTTP: the same store and the same Lua script.
import { Redis } from '@upstash/redis';
import { redisStore } from 'edge-limiter/redis';

export const store = redisStore({
  client: new Redis({
    url: process.env.UPSTASH_REDIS_REST_URL!,
    token: process.env.UPSTASH_REDIS_REST_TOKEN!,
    retry: false, // the limiter's fail mode decides, not client retries
    signal: () => AbortSignal.timeout(1000), // each HTTP request ends with the limiter's timeout
  }),
});
