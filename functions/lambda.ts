// AWS Lambda entry (API Gateway REST v1 and HTTP API v2, Function URLs, ALB), via hono/aws-lambda.
// The store client and app are created once per container, at the first invocation, and reused.
import { handle } from 'hono/aws-lambda';
import type { Hono } from 'hono';
import { loadConfig, storeTimeoutMs } from '../src/config/env.js';
import { createNodeStore } from '../src/config/store-node.js';
import { buildApp } from '../src/http/app.js';

let appPromise: Promise<Hono> | undefined;

async function init(): Promise<Hono> {
  const config = loadConfig(process.env);
  const { store } = await createNodeStore(config.store, { timeoutMs: storeTimeoutMs(config) });
  return buildApp(config, store).app;
}

type LambdaHandler = ReturnType<typeof handle>;

export const handler: LambdaHandler = (async (event: Parameters<LambdaHandler>[0], context: Parameters<LambdaHandler>[1]) => {
  appPromise ??= init().catch((err) => {
    // Configuration errors fail this container's start; log the named field, then throw.
    console.error(JSON.stringify({ msg: 'invalid configuration', error: (err as Error).message }));
    appPromise = undefined;
    throw err;
  });
  const app = await appPromise;
  return handle(app)(event, context);
}) as LambdaHandler;
