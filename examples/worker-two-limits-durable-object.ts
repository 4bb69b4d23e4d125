// The "10 per second and 1,000 per day" Worker on the Durable Object store instead of Upstash: the
// store and the binding change, the policy and the middleware do not. wrangler.toml binds LIMITER_DO
// to RateLimiterObject and declares its migration (the block above this example).
import { Hono, type MiddlewareHandler } from 'hono';
import { createLimiter } from 'edge-limiter';
import { durableObjectStore, type DurableObjectNamespaceLike } from 'edge-limiter/durable-object';
import { rateLimit, headerKey } from 'edge-limiter/hono';

export { RateLimiterObject } from 'edge-limiter/durable-object'; // the class the binding names

type Env = { Bindings: { LIMITER_DO: DurableObjectNamespaceLike } };

let gate: MiddlewareHandler<Env> | undefined;
function gateFor(env: Env['Bindings']): MiddlewareHandler<Env> {
  const limiter = createLimiter({
    store: durableObjectStore({ namespace: env.LIMITER_DO }), // was: redisStore({ client: new Redis(...) })
    policies: {
      api: {
        limits: {
          second: { capacity: 10, refill: '10/second' },
          day: { capacity: 1000, refill: '1000/day' }, // exactly 1000 / 86400 per second
        },
      },
    },
  });
  return rateLimit<Env>({ limiter, policy: 'api', key: headerKey('x-api-key') });
}

const app = new Hono<Env>();
app.use('/api/*', (c, next) => (gate ??= gateFor(c.env))(c, next));
app.get('/api/hello', (c) => c.json({ hello: 'world' }));

export default app;
