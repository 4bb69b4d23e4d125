// The Lambda handler around the app, for a given store factory. The store client and app are created
// once per container, at the first invocation, and reused; a configuration error fails that start.
// Events become Requests and Responses results through our own adapter (lambda-request.ts,
// lambda-result.ts), not hono/aws-lambda's: that one rebuilt the URL from the Host header unchecked,
// decoded text bodies as UTF-8, kept one of several Set-Cookie headers on an ALB, joined repeated
// request headers with "; ", percent-encoded non-ASCII header values and answered a bad event with a
// plain-text 500.
import type { Context as LambdaContext } from 'aws-lambda';
import type { Hono } from 'hono';
import { ConfigError } from '../../src/errors.js';
import { openApiJson } from '../../src/http/openapi.js';
import { problemResponse } from '../../src/http/problem.js';
import { buildApp } from './app.js';
import { keyInConnection } from './gate-refusals.js';
import { nodeSend } from './node-send.js';
import { loadConfig, storeTimeoutMs, type AppConfig } from './env.js';
import { assertNoHashedTwins } from './token-twins.js';
import { eventKind, eventMethod, toRequest, type LambdaHttpEvent } from './lambda-request.js';
import { toResult, type LambdaResult } from './lambda-result.js';
import type { NodeStore, StoreClientOptions } from './node-stores/types.js';

export type { LambdaHttpEvent } from './lambda-request.js';
export type { LambdaResult } from './lambda-result.js';
export type LambdaHandler = (event: LambdaHttpEvent, context: LambdaContext) => Promise<LambdaResult>;
type StoreFactory = (config: AppConfig['store'], options: StoreClientOptions) => Promise<NodeStore>;

// Methods fetch forbids, so no Request can carry them: answered here as the app would answer them.
const UNSENDABLE = /^(?:connect|trace|track)$/i;

/**
 * `kinds`: the store kinds this build contains. A per-store bundle names its one kind, so a container
 * configured for another store fails at start with a message that names LIMITER_STORE.
 */
export function lambdaHandler(createStore: StoreFactory, kinds?: readonly AppConfig['store']['kind'][]): LambdaHandler {
  let appPromise: Promise<Hono> | undefined;
  async function init(): Promise<Hono> {
    const config = loadConfig(process.env);
    assertNoHashedTwins(config.tokens);
    if (kinds && !kinds.includes(config.store.kind)) {
      throw new ConfigError('LIMITER_STORE', `is "${config.store.kind}", but this bundle holds only the ${kinds.join(', ')} store; deploy the ${config.store.kind} bundle`);
    }
    const { store } = await createStore(config.store, { timeoutMs: storeTimeoutMs(config) });
    return buildApp(config, store, { send: nodeSend, openApiJson, refuseGated: keyInConnection(config.gate) }).app;
  }
  return async function handler(event, context) {
    appPromise ??= init().catch((err) => {
      console.error(JSON.stringify({ msg: 'invalid configuration', error: (err as Error).message }));
      appPromise = undefined;
      throw err;
    });
    const app = await appPromise;
    const kind = eventKind(event);
    const method = eventMethod(event, kind);
    if (UNSENDABLE.test(method)) return toResult(kind, problemResponse('method-not-implemented', `${method.toUpperCase()} requests are not served`));
    const built = toRequest(event, kind);
    if ('refusal' in built) return toResult(kind, built.refusal);
    // The env the app's helpers read (clientIp reads event.requestContext), as hono/aws-lambda gives it.
    const res = await app.fetch(built.request, { event, requestContext: event.requestContext, lambdaContext: context });
    return toResult(kind, res);
  };
}
