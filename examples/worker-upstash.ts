// A Cloudflare Worker gating its API with Upstash Redis. Workers pass configuration per request
// (c.env), so the limiter and middleware are built on the first request and reused by the isolate.
import { Hono, type MiddlewareHandler } from 'hono';
import { Redis } from '@upstash/redis/cloudflare';
import { createLimiter } from 'edge-limiter';
import { redisStore } from 'edge-limiter/redis';
import { rateLimit, headerKey } from 'edge-limiter/hono';

type Env = { Bindings: { UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string } };

let gate: MiddlewareHandler<Env> | undefined;
function gateFor(env: Env['Bindings']): MiddlewareHandler<Env> {
  const limiter = createLimiter({
    store: redisStore({
      client: new Redis({
        url: env.UPSTASH_REDIS_REST_URL,
        token: env.UPSTASH_REDIS_REST_TOKEN,
        retry: false, // the policy's onStoreError decides an outage, not client retries
        signal: () => AbortSignal.timeout(1000), // no HTTP request outlives the limiter's timeout
      }),
    }),
    policies: {
      free: { capacity: 20, refillPerSecond: 5 },
      premium: { capacity: 200, refillPerSecond: 50 },
    },
  });
  return rateLimit<Env>({
    limiter,
    policy: (c) => (c.req.header('x-api-key')?.startsWith('pk_') ? 'premium' : 'free'), // tiers
    key: headerKey('x-api-key'), // keyed by the SHA-256 of the value; or ipKey(): CF-Connecting-IP
  });
}

const app = new Hono<Env>();
app.use('/api/*', (c, next) => (gate ??= gateFor(c.env))(c, next));
app.get('/api/hello', (c) => c.json({ hello: 'world' }));

export default app;
