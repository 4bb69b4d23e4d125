// Plain Node server entry: `npm start` serves the app on PORT (default 8787) and shuts down cleanly on SIGTERM/SIGINT.
import { serve } from '@hono/node-server';
import { loadConfig, storeTimeoutMs } from './app/env.js';
import { createNodeStore } from './app/store-node.js';
import { buildApp } from './app/app.js';

let config;
try {
  config = loadConfig(process.env);
} catch (err) {
  console.error((err as Error).message);
  process.exit(1);
}
const { store, close } = await createNodeStore(config.store, { timeoutMs: storeTimeoutMs(config) });
let app;
try {
  app = buildApp(config, store).app;
} catch (err) {
  console.error((err as Error).message);
  await close();
  process.exit(1);
}
const port = Number(process.env.PORT ?? 8787);
const hostname = process.env.HOST ?? '127.0.0.1';
const server = serve({ fetch: app.fetch, port, hostname }, (info) => {
  console.log(JSON.stringify({ msg: 'listening', port: info.port, store: store.name }));
});

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  console.log(JSON.stringify({ msg: 'shutting down', signal }));
  const force = setTimeout(() => process.exit(1), 10_000);
  force.unref();
  server.close(async () => {
    await close();
    process.exit(0);
  });
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
