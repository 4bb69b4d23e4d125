// Plain Node server entry: `npm start` serves the app on PORT (default 8787), prints a curl line, serves
// Prometheus metrics on METRICS_PORT when set, and shuts down cleanly on SIGTERM/SIGINT.
import { Hono } from 'hono';
import { ConfigError } from '../src/errors.js';
import { openApiJson } from '../src/http/openapi.js';
import type { Limiter } from '../src/limiter.js';
import { loadConfig, storeTimeoutMs } from './app/env.js';
import { createNodeStore } from './app/store-node.js';
import { assertNoHashedTwins } from './app/token-twins.js';
import { buildApp } from './app/app.js';
import { createMetrics, type Metrics } from './app/metrics.js';
import { serveNode } from './app/node-http.js';
import { keyInConnection } from './app/gate-refusals.js';
import { nodeSend } from './app/node-send.js';
import { composeOnDecision, statsResponse } from './app/stats.js';
import { createLivePage, SECURITY_HEADERS } from './app/live.js';

function fail(err: unknown): never {
  console.error((err as Error).message);
  process.exit(1);
}

function portFrom(name: string, fallback?: number): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d{1,5}$/.test(raw) || Number(raw) > 65535) fail(new ConfigError(name, `must be a port number from 0 to 65535, got ${JSON.stringify(raw.slice(0, 20))}`));
  return Number(raw);
}

let config;
try {
  config = loadConfig(process.env);
  assertNoHashedTwins(config.tokens);
} catch (err) {
  fail(err);
}
const port = portFrom('PORT', 8787)!;
const metricsPort = portFrom('METRICS_PORT');
const hostname = process.env.HOST ?? '127.0.0.1';

const { store, close } = await createNodeStore(config.store, { timeoutMs: storeTimeoutMs(config) });
const metrics: Metrics | undefined = metricsPort === undefined ? undefined : createMetrics({ store: store.name });
let app;
let stats;
let limiter: Limiter | undefined;
let live;
try {
  // The live page on the metrics port; its time series is fed by onDecision, like the metrics.
  live = metrics ? createLivePage({ policies: Object.keys(config.policies) }) : undefined;
  ({ app, stats, limiter } = buildApp(config, store, {
    send: nodeSend,
    openApiJson,
    refuseGated: keyInConnection(config.gate),
    ...(metrics ? { onDecision: composeOnDecision(metrics.onDecision, live?.onDecision), onAudit: metrics.onAudit } : {}),
  }));
} catch (err) {
  await close();
  fail(err);
}

const servers = [
  // serveNode: serve() with problem+json for what the adapter and Node's parser refuse (node-http.ts).
  serveNode({ fetch: app.fetch, port, hostname }, (info) => {
    // A ready-to-paste line for people. It names the token through a shell variable and never prints
    // it (server logs must not hold tokens). Not PERMIT_TOKENS: set inline (PERMIT_TOKENS=x npm start),
    // it is not in the shell the line is pasted into, and an empty token got a silent 401; unset, TOKEN
    // stops the shell with a line saying what to set.
    const host = hostname.includes(':') ? `[${hostname}]` : hostname;
    const body = JSON.stringify({ policy: Object.keys(config.policies)[0], key: 'user-1' });
    console.log(
      `${JSON.stringify({ msg: 'listening', port: info.port, store: store.name })}\n\n` +
        `edge-limiter is up on the ${store.name} store.${config.tokens.length ? '' : ' Set PERMIT_TOKENS to use the permit API.'} Try, with TOKEN set to a token of PERMIT_TOKENS with the permit right:\n\n` +
        `curl -i -X POST http://${host}:${info.port}/v1/permits -H "Authorization: Bearer \${TOKEN:?set TOKEN to one of the server's PERMIT_TOKENS}" -H 'Content-Type: application/json' -d '${body}'\n`,
    );
  }),
];
if (metrics && metricsPort !== undefined) {
  // Its own port, so the public one never exposes policy names and traffic counts.
  const metricsApp = new Hono();
  // Every answer on this port, the page's, /metrics, /stats.json and a 404 alike, carries the page's
  // Content-Security-Policy and nosniff.
  metricsApp.use('*', async (c, next) => {
    await next();
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) c.res.headers.set(name, value);
  });
  metricsApp.get('/metrics', async (c) => c.body(await metrics.registry.metrics(), 200, { 'Content-Type': metrics.registry.contentType }));
  // The same snapshot as GET /v1/stats, without a token: this port binds to HOST (loopback by default).
  metricsApp.get('/stats.json', () => statsResponse(stats));
  // GET /: the live page for people (read-only), polling /live.json.
  live?.mount(metricsApp, { limiter, stats });
  servers.push(
    serveNode({ fetch: metricsApp.fetch, port: metricsPort, hostname }, (info) => {
      console.log(JSON.stringify({ msg: 'metrics listening', port: info.port, path: '/metrics', page: '/' }));
    }),
  );
}

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  console.log(JSON.stringify({ msg: 'shutting down', signal }));
  const force = setTimeout(() => process.exit(1), 10_000);
  force.unref();
  await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  // Leased tokens go back to the store (docs/library.md: call close() on shutdown) before its client closes.
  await limiter?.close();
  await close();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
