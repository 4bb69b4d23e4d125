// A local fallback instead of failing open or closed: while the store is down, each node admits at most
// 20 requests at once and 2 per second per key on its own (reason 'local'), and nothing more.
import { Redis } from 'ioredis';
import { createLimiter } from 'edge-limiter';
import { redisStore } from 'edge-limiter/redis';

const limiter = createLimiter({
  store: redisStore({ client: new Redis(process.env.REDIS_URL!, { commandTimeout: 500 }) }),
  expectedNodes: 5, // the default local limit is the policy's divided by this: here 20 and 2/s
  policies: {
    api: { capacity: 100, refillPerSecond: 10, onStoreError: 'local' },
    // Or name the local limit: each number at most the policy's own.
    search: { capacity: 50, refillPerSecond: 5, onStoreError: 'local', local: { capacity: 5, refillPerSecond: 0.5 } },
  },
});

const d = await limiter.take('api', 'key-123'); // d.reason === 'local' while the store is down
