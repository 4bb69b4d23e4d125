// API keys on a `free` or a `pro` plan, on a Cloudflare Worker with Upstash Redis. The policy's numbers
// are the free plan's; a pro customer's key has its own numbers, kept in Redis beside its bucket and read
// in the same atomic step. Upgrading (or downgrading) is one call, and the next request at every edge
// location is decided under the new plan: no redeploy, no cache to wait for.
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { bearerAuth } from 'hono/bearer-auth';
import { Redis } from '@upstash/redis/cloudflare';
import { createLimiter, type Limiter } from 'edge-limiter';
import { redisStore } from 'edge-limiter/redis';
import { rateLimit } from 'edge-limiter/hono';

type Env = {
  Bindings: { UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string; ADMIN_TOKEN: string };
  Variables: { customer: string };
};

export const PLANS = {
  free: { capacity: 10, refill: '10/minute' },
  pro: { capacity: 100, refill: '100/minute' },
} as const;

// Your own key store stands here: which customer an API key belongs to (a KV or database lookup).
const CUSTOMERS: Record<string, string> = { 'key-alice': 'alice', 'key-bob': 'bob' };

let limiter: Limiter<'api'> | undefined;
let gate: MiddlewareHandler<Env> | undefined;
function limiterFor(env: Env['Bindings']): Limiter<'api'> {
  const client = new Redis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN, retry: false, signal: () => AbortSignal.timeout(1000) });
  return (limiter ??= createLimiter({ store: redisStore({ client }), policies: { api: PLANS.free } }));
}

const app = new Hono<Env>();

// Requests are limited per customer (not per API key: a customer's keys share the plan).
app.use('/api/*', async (c, next) => {
  const customer = CUSTOMERS[c.req.header('x-api-key') ?? ''];
  if (customer === undefined) return c.json({ error: 'unknown API key' }, 401);
  c.set('customer', customer);
  gate ??= rateLimit<Env>({ limiter: limiterFor(c.env), policy: 'api', key: (c) => c.get('customer') });
  return gate(c, next);
});
app.get('/api/hello', (c) => c.json({ hello: c.get('customer') }));

// The plan change: one call. `pro` sets the customer's own numbers; `free` drops them (the policy's again).
app.use('/admin/*', (c, next) => bearerAuth({ token: c.env.ADMIN_TOKEN })(c as Context, next));
app.put('/admin/customers/:id/plan', async (c) => {
  const { plan } = await c.req.json<{ plan: keyof typeof PLANS }>();
  const limits = limiterFor(c.env);
  const now = plan === 'pro' ? await limits.setLimits('api', c.req.param('id'), PLANS.pro, { actor: 'billing' }) : await limits.clearLimits('api', c.req.param('id'), { actor: 'billing' });
  return c.json(now); // { limits: [{ capacity: 100, ... }], source: 'key', previous: { ... } }
});

export default app;
