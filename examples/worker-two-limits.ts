// "10 per second and 1,000 per day per API key" on a Cloudflare Worker: one policy with two limits,
// decided in one atomic step (a request refused by the daily limit is not counted against the second).
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
      client: new Redis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN, retry: false, signal: () => AbortSignal.timeout(1000) }),
    }),
    policies: {
      api: {
        limits: {
          second: { capacity: 10, refill: '10/second' },
          day: { capacity: 1000, refill: '1000/day' }, // exactly 1000 / 86400 per second
        },
      },
    },
  });
  // Headers list both: RateLimit-Policy: "api.second";q=10;w=1, "api.day";q=1000;w=86400
  // A 429's problem body names the limit that refused: { "refusedBy": ["day"], ... }
  return rateLimit<Env>({ limiter, policy: 'api', key: headerKey('x-api-key') });
}

const app = new Hono<Env>();
app.use('/api/*', (c, next) => (gate ??= gateFor(c.env))(c, next));
app.get('/api/hello', (c) => c.json({ hello: 'world' }));

export default app;
