// AWS Lambda (API Gateway, Function URL or ALB) gating by client IP, with Redis over TCP.
import { Hono } from 'hono';
import { handle } from 'hono/aws-lambda';
import { Redis } from 'ioredis';
import { createLimiter } from 'edge-limiter';
import { redisStore } from 'edge-limiter/redis';
import { rateLimit, ipKey } from 'edge-limiter/hono';

// Created once per container and reused by every invocation it serves.
const limiter = createLimiter({
  store: redisStore({ client: new Redis(process.env.REDIS_URL!, { commandTimeout: 1000, maxRetriesPerRequest: 0 }) }),
  policies: { api: { capacity: 100, refillPerSecond: 10, onStoreError: 'allow' } },
});

const app = new Hono();
// The API Gateway / Function URL sourceIp; behind an ALB, the address the ALB appended.
app.use('*', rateLimit({ limiter, policy: 'api', key: ipKey() }));
app.get('/hello', (c) => c.json({ hello: 'world' }));

export const handler = handle(app);
