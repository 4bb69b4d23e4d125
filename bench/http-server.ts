// The HTTP benchmark's server: a Hono app served by @hono/node-server, as functions/node.ts serves it,
// with no limiter, with our middleware, or with hono-rate-limiter (memory store each time); and, as
// floors, with an empty middleware or with only our headers and no limiter. Every request is allowed
// (huge limits), so the figure is the limiter's overhead. Prints "listening <port>".
import { Hono } from 'hono';
import { serve } from '@hono/node-server';
import { rateLimiter } from 'hono-rate-limiter';
import { createLimiter, memoryStore } from '../src/index.js';
import { rateLimit, ipKey } from '../src/hono.js';

const mode = process.argv[2] as 'none' | 'ours' | 'ours-draft-headers' | 'hono-rate-limiter' | 'empty-middleware' | 'headers-only' | 'draft-headers-only';
const app = new Hono();
if (mode === 'ours' || mode === 'ours-draft-headers') {
  const limiter = createLimiter({ store: memoryStore(), policies: { bench: { capacity: 1_000_000_000, refillPerSecond: 1_000_000 } } });
  app.use('*', rateLimit({ limiter, policy: 'bench', key: ipKey(), legacyHeaders: mode === 'ours' }));
} else if (mode === 'hono-rate-limiter') {
  app.use(
    '*',
    rateLimiter({
      windowMs: 60_000,
      limit: 1_000_000_000,
      standardHeaders: 'draft-7',
      keyGenerator: (c) => (c.env as { incoming?: { socket?: { remoteAddress?: string } } }).incoming?.socket?.remoteAddress ?? 'unknown',
    }),
  );
} else if (mode === 'empty-middleware') {
  // Not a limiter: what any async middleware costs (Hono leaves its one-handler fast path).
  app.use('*', async (_c, next) => {
    await next();
  });
} else if (mode === 'headers-only' || mode === 'draft-headers-only') {
  // Not a limiter: the headers our middleware sends on an allowed request (all five, or the two draft-11
  // fields that legacyHeaders: false leaves), with fixed values, set the cheapest way Hono offers
  // (c.header() before next(), so the response is built with them). What any middleware sending these
  // headers costs at least.
  const legacy = mode === 'headers-only';
  app.use('*', async (c, next) => {
    c.header('RateLimit-Policy', '"bench";q=1000000000;w=1000');
    c.header('RateLimit', '"bench";r=999999999;t=1');
    if (legacy) {
      c.header('X-RateLimit-Limit', '1000000000');
      c.header('X-RateLimit-Remaining', '999999999');
      c.header('X-RateLimit-Reset', '1');
    }
    await next();
  });
} else if (mode !== 'none') {
  throw new Error(`unknown mode ${mode}`);
}
app.get('/hello', (c) => c.text('hello'));
serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => console.log(`listening ${info.port}`));
// Over an IPC channel (bench/http-load.ts opens one), "cpu" asks for this process's CPU time so far.
process.on('message', (m) => {
  if (m === 'cpu') process.send!(process.cpuUsage());
});
// Exit cleanly on a signal, so that `node --cpu-prof` writes its profile.
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => process.exit(0));
