// Token leases for hot keys: this node takes up to 100 tokens of a key's bucket in one store call and
// answers later takes on that key from them, without a round trip. Opt-in per policy.
import { Redis } from 'ioredis';
import { createLimiter } from 'edge-limiter';
import { redisStore } from 'edge-limiter/redis';

const limiter = createLimiter({
  store: redisStore({ client: new Redis(process.env.REDIS_URL!, { commandTimeout: 1000 }) }),
  policies: {
    // 1000 requests/s per API key; a node holds at most 100 of them, each usable for 100 ms (100 / 1000 s).
    api: { capacity: 1000, refillPerSecond: 1000, lease: { tokens: 100, maxAgeMs: 2000 } },
  },
});

const d = await limiter.take('api', 'key-123'); // d.reason === 'lease' when answered locally
console.log(d.allowed, d.remaining); // remaining: tokens left in this node's lease

// On shutdown, give unused leased tokens back to the bucket.
process.once('SIGTERM', () => void limiter.close());
