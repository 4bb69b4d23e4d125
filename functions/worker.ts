// Cloudflare Workers entry. Configuration comes from wrangler.toml vars and secrets (see docs/configuration.md and docs/deploying.md).
// The app is built on the first request of each isolate and reused; a configuration error answers
// 500 problem+json naming the field (Workers have no start-up phase to fail in).
import type { ExecutionContext, Hono } from 'hono';
import { loadConfig, storeTimeoutMs } from './app/env.js';
import { createEdgeStore } from './app/store-edge.js';
import { buildApp } from './app/app.js';
import { problemResponse } from '../src/http/problem.js';

// The Durable Object class behind LIMITER_STORE=durable-object (bound as LIMITER_DO in wrangler.toml).
export { RateLimiterObject } from '../src/stores/durable-object.js';

let built: { env: unknown; app: Hono } | { env: unknown; error: Error } | undefined;

function appFor(env: Record<string, unknown>): Hono | Error {
  if (!built || built.env !== env) {
    try {
      const config = loadConfig(env);
      built = { env, app: buildApp(config, createEdgeStore(config.store, { timeoutMs: storeTimeoutMs(config), env })).app };
    } catch (err) {
      built = { env, error: err as Error };
      console.error(JSON.stringify({ msg: 'invalid configuration', error: (err as Error).message }));
    }
  }
  return 'app' in built ? built.app : built.error;
}

export default {
  fetch(request: Request, env: Record<string, unknown>, ctx: ExecutionContext): Response | Promise<Response> {
    const app = appFor(env);
    if (app instanceof Error) return problemResponse('server-misconfigured', app.message.replace('[edge-limiter] ', ''));
    return app.fetch(request, env, ctx);
  },
};
