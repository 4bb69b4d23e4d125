// A plain Node script as a user writes one: a limiter on a Redis store whose client it made, one
// decision, then limiter.close(). CLIENT: ioredis | node-redis; CLOSE_CLIENT: '1' gives the store the
// client. The test (test/store-close.test.ts) checks whether the script exits on its own.
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { createLimiter } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis.js';

const closeClient = process.env.CLOSE_CLIENT === '1';
const url = process.env.REDIS_URL!;
const client = process.env.CLIENT === 'ioredis' ? new Redis(url) : await createClient({ url }).connect();
const limiter = createLimiter({ store: redisStore({ client, closeClient }), policies: { p: { capacity: 10, refillPerSecond: 10 } } });
const decision = await limiter.take('p', 'k');
await limiter.close();
console.log(JSON.stringify({ allowed: decision.allowed }));
