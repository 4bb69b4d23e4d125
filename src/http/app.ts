// The deployable app shared by the Worker, Lambda and Node entries: the permit API, /healthz, and in
// gateway mode every other path gated by GATE_POLICY and proxied to GATE_ORIGIN.
import type { Hono } from 'hono';
import { proxy } from 'hono/proxy';
import type { AppConfig } from '../config/env.js';
import { inEnv } from '../config/env.js';
import { createLimiter, type Limiter } from '../limiter.js';
import type { Store } from '../store.js';
import { headerKey, ipKey } from './key.js';
import { rateLimit } from './middleware.js';
import { permitApp } from './permit-app.js';
import { problemResponse } from './problem.js';

export interface BuiltApp {
  app: Hono;
  limiter: Limiter;
}

export function buildLimiter(config: AppConfig, store: Store): Limiter {
  try {
    return createLimiter({ store, policies: config.policies });
  } catch (err) {
    throw inEnv(err);
  }
}

export function buildApp(config: AppConfig, store: Store): BuiltApp {
  const limiter = buildLimiter(config, store);
  const app = permitApp({ limiter, tokens: config.tokens });
  const gate = config.gate;
  if (gate) {
    const key = gate.key === 'ip' ? ipKey() : headerKey(gate.key.header);
    const gated = rateLimit({ limiter, policy: gate.policy, key });
    app.all('*', async (c, next) => {
      const path = c.req.path;
      if (path === '/healthz' || path.startsWith('/v1/')) return next();
      return gated(c, async () => {
        const url = new URL(c.req.url);
        try {
          c.res = await proxy(`${gate.origin}${url.pathname}${url.search}`, {
            raw: c.req.raw,
            headers: { ...c.req.header(), host: undefined },
          });
        } catch {
          c.res = problemResponse('bad-gateway', 'the origin could not be reached');
        }
      });
    });
  }
  return { app, limiter };
}
