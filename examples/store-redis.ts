// Redis over TCP: ioredis (or its Cluster), or the official `redis` client (or createCluster).
import { Redis } from 'ioredis';
import { redisStore } from 'edge-limiter/redis';

// commandTimeout: the client itself gives up on a command the limiter has stopped waiting for.
export const store = redisStore({ client: new Redis(process.env.REDIS_URL!, { commandTimeout: 1000 }) });
