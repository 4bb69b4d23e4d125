// A Cloudflare Worker on the Durable Object store: no external service. Export the class and bind it
// in wrangler.toml ([[durable_objects.bindings]] name = "LIMITER_DO", class_name = "RateLimiterObject",
// plus a migration with new_sqlite_classes = ["RateLimiterObject"]).
import { Hono, type MiddlewareHandler } from 'hono';
import { createLimiter } from 'edge-limiter';
import { durableObjectStore, type DurableObjectNamespaceLike } from 'edge-limiter/durable-object';
import { rateLimit, ipKey } from 'edge-limiter/hono';

export { RateLimiterObject } from 'edge-limiter/durable-object';

type Env = { Bindings: { LIMITER_DO: DurableObjectNamespaceLike } };

let gate: MiddlewareHandler<Env> | undefined;
const gateFor = (env: Env['Bindings']) =>
  rateLimit<Env>({
    limiter: createLimiter({
      store: durableObjectStore({ namespace: env.LIMITER_DO }), // one object per key
      policies: { api: { capacity: 100, refillPerSecond: 10 } },
    }),
    policy: 'api',
    key: ipKey(), // CF-Connecting-IP
  });

const app = new Hono<Env>();
app.use('/api/*', (c, next) => (gate ??= gateFor(c.env))(c, next));
app.get('/api/hello', (c) => c.json({ hello: 'world' }));

export default app;
