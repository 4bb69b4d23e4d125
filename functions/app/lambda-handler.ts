// The Lambda handler around the app, for a given store factory. The store client and app are created
// once per container, at the first invocation, and reused; a configuration error fails that start.
import { handle } from 'hono/aws-lambda';
import { Hono } from 'hono';
import { ConfigError } from '../../src/errors.js';
import { problemResponse } from '../../src/http/problem.js';
import { buildApp } from './app.js';
import { nodeSend } from './node-send.js';
import { loadConfig, storeTimeoutMs, type AppConfig } from './env.js';
import type { NodeStore, StoreClientOptions } from './node-stores/types.js';

export type LambdaHandler = ReturnType<typeof handle>;
type StoreFactory = (config: AppConfig['store'], options: StoreClientOptions) => Promise<NodeStore>;

type LambdaEvent = { httpMethod?: string; method?: string; requestContext?: { http?: { method?: string } } };

// Methods fetch forbids: hono/aws-lambda cannot build a Request for them and answers a plain-text 400.
const UNSENDABLE = /^(?:connect|trace|track)$/i;

/**
 * The 501 problem+json the app gives these methods, shaped for the event's kind by the adapter itself
 * (it is run on a copy of the event whose method it can build, against an app that only refuses).
 */
function refuseMethod(event: LambdaEvent, method: string, context: Parameters<LambdaHandler>[1]) {
  const refusal = new Hono().all('*', () => problemResponse('method-not-implemented', `${method.toUpperCase()} requests are not served`));
  // A GET with no body (the adapter refuses to build a GET with one).
  const asGet = event.requestContext?.http?.method
    ? { ...event, body: null, requestContext: { ...event.requestContext, http: { ...event.requestContext.http, method: 'GET' } } }
    : event.httpMethod
      ? { ...event, body: null, httpMethod: 'GET' }
      : { ...event, body: null, method: 'GET' };
  return handle(refusal)(asGet as Parameters<LambdaHandler>[0], context);
}

/**
 * `kinds`: the store kinds this build contains. A per-store bundle names its one kind, so a container
 * configured for another store fails at start with a message that names LIMITER_STORE.
 */
export function lambdaHandler(createStore: StoreFactory, kinds?: readonly AppConfig['store']['kind'][]): LambdaHandler {
  let appPromise: Promise<Hono> | undefined;
  async function init(): Promise<Hono> {
    const config = loadConfig(process.env);
    if (kinds && !kinds.includes(config.store.kind)) {
      throw new ConfigError('LIMITER_STORE', `is "${config.store.kind}", but this bundle holds only the ${kinds.join(', ')} store; deploy the ${config.store.kind} bundle`);
    }
    const { store } = await createStore(config.store, { timeoutMs: storeTimeoutMs(config) });
    return buildApp(config, store, { send: nodeSend }).app;
  }
  return (async (event: Parameters<LambdaHandler>[0], context: Parameters<LambdaHandler>[1]) => {
    appPromise ??= init().catch((err) => {
      console.error(JSON.stringify({ msg: 'invalid configuration', error: (err as Error).message }));
      appPromise = undefined;
      throw err;
    });
    const app = await appPromise;
    const e = event as LambdaEvent;
    const method = e.requestContext?.http?.method ?? e.httpMethod ?? e.method;
    if (method && UNSENDABLE.test(method)) return refuseMethod(event as LambdaEvent, method, context);
    return handle(app)(event, context);
  }) as LambdaHandler;
}
