// Lambda HTTP events built from the real fixtures in test/fixtures/lambda/, in each source's own shape:
// a REST API (v1) keeps the client's header case in `headers` (last value) and `multiValueHeaders`
// (every value); HTTP API and Function URLs (v2) lower-case names, join repeats with "," and move
// Cookie into `cookies`; an ALB lower-cases names and keeps the last value, or every value with
// multi-value headers on. Also the result helpers the Lambda tests share.
import { readFileSync } from 'node:fs';
import { vi } from 'vitest';

export const KINDS = ['apigw-v1', 'apigw-v2', 'function-url', 'alb', 'alb-multi'] as const;
export type Kind = (typeof KINDS)[number];

export type LambdaEvent = Record<string, any>;
export type LambdaResult = { statusCode: number; headers?: Record<string, string>; multiValueHeaders?: Record<string, string[]>; cookies?: string[]; body: string; isBase64Encoded: boolean };
export type LambdaHandler = (event: unknown, context: unknown) => Promise<LambdaResult>;

export const context = { awsRequestId: 'req-1', functionName: 'edge-limiter', getRemainingTimeInMillis: () => 3000 } as never;

export const fixture = (name: string): LambdaEvent => JSON.parse(readFileSync(new URL(`../fixtures/lambda/${name}.json`, import.meta.url), 'utf8'));

export interface EventInit {
  method?: string;
  path?: string;
  /** Decoded name/value pairs; an ALB event gets them encoded, as an ALB passes them. */
  query?: [string, string][];
  /** Replace the fixture's fields of the same names (case-insensitive); a name may repeat. */
  headers?: [string, string][];
  /** Fixture fields to leave out. */
  drop?: string[];
  body?: string | Uint8Array;
  /** Send the body base64-encoded (always so for bytes). */
  base64?: boolean;
  /** A body string sent as it is with isBase64Encoded: true (to send invalid base64). */
  rawBase64Body?: string;
}

function baseFields(event: LambdaEvent): [string, string][] {
  const out: [string, string][] = [];
  if (event.multiValueHeaders) for (const [k, vs] of Object.entries(event.multiValueHeaders as Record<string, string[]>)) for (const v of vs) out.push([k, v]);
  else for (const [k, v] of Object.entries(event.headers as Record<string, string>)) out.push([k, v]);
  return out;
}

export function lambdaEvent(kind: Kind, init: EventInit = {}): LambdaEvent {
  const event = fixture(kind);
  const method = init.method ?? 'POST';
  const path = init.path ?? event.path ?? event.rawPath;
  const replaced = new Set([...(init.headers ?? []).map(([k]) => k.toLowerCase()), ...(init.drop ?? []).map((k) => k.toLowerCase()), 'content-length']);
  const fields = [...baseFields(event).filter(([k]) => !replaced.has(k.toLowerCase())), ...(init.headers ?? [])];
  const query = init.query ?? [];

  let body: string | null = null;
  let isBase64Encoded = false;
  if (init.rawBase64Body !== undefined) [body, isBase64Encoded] = [init.rawBase64Body, true];
  else if (init.body instanceof Uint8Array || (init.body !== undefined && init.base64)) [body, isBase64Encoded] = [Buffer.from(init.body).toString('base64'), true];
  else if (init.body !== undefined) body = init.body;
  event.body = body;
  event.isBase64Encoded = isBase64Encoded;

  if (kind === 'apigw-v2' || kind === 'function-url') {
    const headers: Record<string, string> = {};
    const cookies: string[] = [];
    for (const [k, v] of fields) {
      const name = k.toLowerCase();
      if (name === 'cookie') cookies.push(...v.split(/;\s*/));
      else headers[name] = name in headers ? `${headers[name]},${v}` : v;
    }
    event.headers = headers;
    if (cookies.length > 0) event.cookies = cookies;
    event.rawPath = path;
    event.rawQueryString = new URLSearchParams(query).toString();
    if (query.length > 0) event.queryStringParameters = Object.fromEntries(query);
    Object.assign(event.requestContext.http, { method, path });
    if (body === null) delete event.body;
    return event;
  }
  event.httpMethod = method;
  event.path = path;
  if (kind === 'apigw-v1') {
    event.headers = {};
    event.multiValueHeaders = {};
    for (const [k, v] of fields) {
      event.headers[k] = v;
      (event.multiValueHeaders[k] ??= []).push(v);
    }
    Object.assign(event.requestContext, { httpMethod: method, path: `/prod${path}` });
    event.queryStringParameters = query.length > 0 ? Object.fromEntries(query) : null;
    event.multiValueQueryStringParameters = query.length > 0 ? groupPairs(query) : null;
    return event;
  }
  // ALB: names lower-cased, query parameters as the client encoded them.
  const encoded = query.map(([k, v]) => [encodeURIComponent(k), encodeURIComponent(v)] as [string, string]);
  if (kind === 'alb') {
    event.headers = {};
    for (const [k, v] of fields) event.headers[k.toLowerCase()] = v;
    event.queryStringParameters = Object.fromEntries(encoded);
  } else {
    event.multiValueHeaders = {};
    for (const [k, v] of fields) (event.multiValueHeaders[k.toLowerCase()] ??= []).push(v);
    event.multiValueQueryStringParameters = groupPairs(encoded);
  }
  return event;
}

function groupPairs(pairs: [string, string][]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [k, v] of pairs) (out[k] ??= []).push(v);
  return out;
}

/** A result's header as the client would read it (repeats joined with ", "), any name case. */
export function resultHeader(res: LambdaResult, name: string): string | undefined {
  const lower = name.toLowerCase();
  const values: string[] = [];
  for (const [k, v] of Object.entries(res.headers ?? {})) if (k.toLowerCase() === lower) values.push(v);
  for (const [k, vs] of Object.entries(res.multiValueHeaders ?? {})) if (k.toLowerCase() === lower) values.push(...vs);
  return values.length > 0 ? values.join(', ') : undefined;
}

/** Every Set-Cookie a client of this result receives, whatever the shape carries them in. */
export function resultCookies(res: LambdaResult): string[] {
  const out = [...(res.cookies ?? [])];
  for (const [k, v] of Object.entries(res.headers ?? {})) if (k.toLowerCase() === 'set-cookie') out.push(v);
  for (const [k, vs] of Object.entries(res.multiValueHeaders ?? {})) if (k.toLowerCase() === 'set-cookie') out.push(...vs);
  return out;
}

export const resultBytes = (res: LambdaResult): Buffer => (res.isBase64Encoded ? Buffer.from(res.body, 'base64') : Buffer.from(res.body, 'utf8'));

export const ENV_KEYS = ['LIMITER_STORE', 'LIMITER_POLICIES', 'PERMIT_TOKENS', 'REDIS_URL', 'UPSTASH_REDIS_REST_URL', 'MONGODB_URI', 'GATE_ORIGIN', 'GATE_POLICY', 'GATE_KEY', 'GATE_MAX_BODY_BYTES', 'GATE_TRUSTED_PROXIES', 'GATE_TIMEOUT_MS'];

/** functions/lambda.ts's handler, loaded fresh (a new container) with these variables. */
export async function loadLambda(env: Record<string, string>): Promise<LambdaHandler> {
  vi.resetModules();
  for (const k of ENV_KEYS) delete process.env[k];
  Object.assign(process.env, env);
  return (await import('../../functions/lambda.js')).handler as unknown as LambdaHandler;
}
