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

let built: { env: unknown; app: Hono; peer: string | undefined } | { env: unknown; error: Error } | undefined;

function appFor(env: Record<string, unknown>): { app: Hono; peer: string | undefined } | Error {
  if (!built || built.env !== env) {
    try {
      const config = loadConfig(env);
      // DEV_PEER_IP, which `npm run dev` sets (scripts/dev.mjs) and a deployed Worker never has: the
      // address every request comes from locally, as wrangler dev listens on 127.0.0.1 only. Miniflare
      // sets CF-Connecting-IP from the socket only when the request has none, so without it a local
      // client chose its own address (a fresh bucket per request, and the address the origin was told).
      // In production Cloudflare sets the header itself, whatever the client sent.
      const peer = typeof env.DEV_PEER_IP === 'string' && env.DEV_PEER_IP !== '' ? env.DEV_PEER_IP : undefined;
      built = { env, app: buildApp(config, createEdgeStore(config.store, { timeoutMs: storeTimeoutMs(config), env })).app, peer };
    } catch (err) {
      built = { env, error: err as Error };
      console.error(JSON.stringify({ msg: 'invalid configuration', error: (err as Error).message }));
    }
  }
  return 'app' in built ? built : built.error;
}

export default {
  fetch(request: Request, env: Record<string, unknown>, ctx: ExecutionContext): Response | Promise<Response> {
    const entry = appFor(env);
    if (entry instanceof Error) return problemResponse('server-misconfigured', entry.message.replace('[edge-limiter] ', ''));
    if (entry.peer === undefined) return entry.app.fetch(request, env, ctx);
    // The request as from DEV_PEER_IP, whatever CF-Connecting-IP it carried (request.cf is kept).
    const headers = new Headers(request.headers);
    headers.set('cf-connecting-ip', entry.peer);
    return entry.app.fetch(new Request(request, { headers }), env, ctx);
  },
};
