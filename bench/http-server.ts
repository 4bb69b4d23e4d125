// The HTTP benchmark's server: a Hono app served by @hono/node-server, as functions/node.ts serves it,
// with no limiter, with our middleware, or with hono-rate-limiter (memory store each time). Every
// request is allowed (huge limits), so the figure is the limiter's overhead. Prints "listening <port>".
import { Hono } from 'hono';
import { serve } from '@hono/node-server';
import { rateLimiter } from 'hono-rate-limiter';
import { createLimiter, memoryStore } from '../src/index.js';
import { rateLimit, ipKey } from '../src/hono.js';

const mode = process.argv[2] as 'none' | 'ours' | 'ours-draft-headers' | 'hono-rate-limiter';
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
} else if (mode !== 'none') {
  throw new Error(`unknown mode ${mode}`);
}
app.get('/hello', (c) => c.text('hello'));
serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => console.log(`listening ${info.port}`));
// Exit cleanly on a signal, so that `node --cpu-prof` writes its profile.
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => process.exit(0));
