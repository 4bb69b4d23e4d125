// The Lambda entry driven by real event shapes: API Gateway REST (v1), HTTP API (v2), Function URL, ALB.
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Hono } from 'hono';
import { handle } from 'hono/aws-lambda';
import { clientIp } from '../../src/http/key.js';

const fixture = (name: string) => JSON.parse(readFileSync(new URL(`../fixtures/lambda/${name}.json`, import.meta.url), 'utf8'));
const context = { awsRequestId: 'req-1', functionName: 'edge-limiter', getRemainingTimeInMillis: () => 3000 } as never;

type LambdaResult = { statusCode: number; headers?: Record<string, string>; multiValueHeaders?: Record<string, string[]>; body: string; isBase64Encoded: boolean };

function header(res: LambdaResult, name: string): string | undefined {
  const lower = name.toLowerCase();
  for (const [k, v] of Object.entries(res.headers ?? {})) if (k.toLowerCase() === lower) return v;
  for (const [k, v] of Object.entries(res.multiValueHeaders ?? {})) if (k.toLowerCase() === lower) return v.join(', ');
  return undefined;
}

async function loadHandler(env: Record<string, string>) {
  vi.resetModules();
  for (const k of ['LIMITER_STORE', 'LIMITER_POLICIES', 'PERMIT_TOKENS', 'REDIS_URL', 'UPSTASH_REDIS_REST_URL', 'MONGODB_URI', 'GATE_ORIGIN', 'GATE_MAX_BODY_BYTES']) delete process.env[k];
  Object.assign(process.env, env);
  return (await import('../../functions/lambda.js')).handler as unknown as (e: unknown, c: unknown) => Promise<LambdaResult>;
}

const ENV = { LIMITER_POLICIES: JSON.stringify({ api: { capacity: 2, refillPerSecond: 1 } }), PERMIT_TOKENS: 'lambda-token' };

/** The fixture `name` as a request of `method` to `path` (with `body` as JSON), in that event's shape. */
function eventOf(name: string, method: string, path: string, body?: unknown) {
  const event = fixture(name);
  if (event.requestContext?.http) Object.assign(event.requestContext.http, { method, path });
  else event.httpMethod = method;
  if (event.requestContext?.httpMethod) event.requestContext.httpMethod = method;
  if (event.rawPath) event.rawPath = path;
  else event.path = path;
  if (event.requestContext?.path) event.requestContext.path = `/prod${path}`;
  for (const headers of [event.headers, event.multiValueHeaders]) {
    for (const k of Object.keys(headers ?? {})) if (/^content-length$/i.test(k)) delete headers[k];
  }
  if (body === undefined) delete event.body;
  else event.body = JSON.stringify(body);
  event.isBase64Encoded = false;
  return event;
}

describe('Lambda entry', () => {
  beforeEach(() => vi.restoreAllMocks());

  for (const name of ['apigw-v1', 'apigw-v2', 'function-url', 'alb', 'alb-multi']) {
    it(`${name}: 200 then 429 with the rate-limit headers; the store persists across invocations`, async () => {
      const handler = await loadHandler(ENV);
      const event = fixture(name);
      const first = await handler(structuredClone(event), context);
      expect(first.statusCode).toBe(200);
      const body = JSON.parse(first.isBase64Encoded ? Buffer.from(first.body, 'base64').toString() : first.body);
      expect(body).toMatchObject({ allowed: true, policy: 'api', key: 'user-1', limit: 2, remaining: 1 });
      expect(header(first, 'ratelimit')).toBe('"api";r=1;t=1');
      expect(header(first, 'content-type')).toBe('application/json');
      await handler(structuredClone(event), context);
      const third = await handler(structuredClone(event), context);
      expect(third.statusCode).toBe(429);
      expect(header(third, 'retry-after')).toBe('1');
    });
  }

  it('serves GET /v1/openapi.json without a token in each event shape', async () => {
    const { openApiJson } = await import('../../src/http/openapi.js');
    const handler = await loadHandler(ENV);
    for (const name of ['apigw-v1', 'apigw-v2', 'function-url', 'alb', 'alb-multi']) {
      const event = fixture(name);
      const path = '/v1/openapi.json';
      if (event.requestContext?.http) Object.assign(event.requestContext.http, { method: 'GET', path });
      else event.httpMethod = 'GET';
      if (event.rawPath) event.rawPath = path;
      else event.path = path;
      if (event.requestContext?.path) event.requestContext.path = `/prod${path}`;
      if (event.requestContext?.httpMethod) event.requestContext.httpMethod = 'GET';
      for (const headers of [event.headers, event.multiValueHeaders]) {
        for (const k of Object.keys(headers ?? {})) if (/^(authorization|content-type|content-length)$/i.test(k)) delete headers[k];
      }
      delete event.body;
      event.isBase64Encoded = false;
      const res = await handler(event, context);
      expect(res.statusCode, name).toBe(200);
      expect(header(res, 'content-type'), name).toBe('application/json');
      expect(res.isBase64Encoded ? Buffer.from(res.body, 'base64').toString() : res.body, name).toBe(openApiJson);
    }
  });

  it('PUT and DELETE /v1/limits/api/ (an empty key) answer 404 in each event shape and leave the policy-wide change as it was (review 5, H1)', async () => {
    const handler = await loadHandler(ENV);
    for (const name of ['apigw-v1', 'apigw-v2', 'function-url', 'alb', 'alb-multi']) {
      expect((await handler(eventOf(name, 'PUT', '/v1/limits/api', { capacity: 1, refill: '1/hour' }), context)).statusCode, name).toBe(200);
      for (const res of [await handler(eventOf(name, 'PUT', '/v1/limits/api/', { capacity: 1000, refill: '1000/second' }), context), await handler(eventOf(name, 'DELETE', '/v1/limits/api/'), context)]) {
        expect(res.statusCode, name).toBe(404);
        expect(header(res, 'content-type'), name).toBe('application/problem+json');
      }
      const wide = await handler(eventOf(name, 'GET', '/v1/limits/api'), context);
      expect(JSON.parse(wide.isBase64Encoded ? Buffer.from(wide.body, 'base64').toString() : wide.body), name).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 1 }] });
      expect((await handler(eventOf(name, 'DELETE', '/v1/limits/api'), context)).statusCode, name).toBe(200);
    }
  });

  it('answers 401 problem+json without a token, from a v2 event', async () => {
    const handler = await loadHandler(ENV);
    const event = fixture('apigw-v2');
    delete event.headers.authorization;
    const res = await handler(event, context);
    expect(res.statusCode).toBe(401);
    expect(header(res, 'content-type')).toBe('application/problem+json');
  });

  it('fails its start with the field named when the configuration is invalid', async () => {
    vi.spyOn(console, 'error').mockImplementation(() => {});
    const handler = await loadHandler({ ...ENV, LIMITER_POLICIES: '{"api":{"capacity":-1,"refillPerSecond":1}}' });
    await expect(handler(fixture('apigw-v1'), context)).rejects.toThrow(/LIMITER_POLICIES\.api\.capacity/);
  });

  it('fails its start naming PERMIT_TOKENS[1].secret when a plain secret is another token\'s sha256: form, never echoing it', async () => {
    const errors = vi.spyOn(console, 'error').mockImplementation(() => {});
    const hashed = `sha256:${createHash('sha256').update('lambda-token').digest('hex')}`;
    const handler = await loadHandler({ ...ENV, PERMIT_TOKENS: `lambda-token,${hashed}` });
    await expect(handler(fixture('apigw-v1'), context)).rejects.toThrow(/PERMIT_TOKENS\[1\]\.secret/);
    expect(JSON.stringify(errors.mock.calls)).not.toContain('lambda-tok');
  });

  it('gateway mode: a body reaches the origin; one over GATE_MAX_BODY_BYTES gets 413 problem+json, with or without a Content-Length', async () => {
    const got: string[] = [];
    const origin = createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => (got.push(body), res.end(`origin got ${body.length}`)));
    });
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', () => r()));
    try {
      const handler = await loadHandler({ ...ENV, GATE_ORIGIN: `http://127.0.0.1:${(origin.address() as AddressInfo).port}`, GATE_MAX_BODY_BYTES: '64' });
      const upload = (body: string, withLength: boolean) => {
        const event = fixture('apigw-v2');
        event.rawPath = event.requestContext.http.path = '/upload';
        event.headers['content-type'] = 'text/plain';
        if (withLength) event.headers['content-length'] = String(body.length);
        else delete event.headers['content-length'];
        event.body = Buffer.from(body).toString('base64');
        return handler(event, context);
      };
      const ok = await upload('x'.repeat(64), true);
      expect(ok.statusCode).toBe(200);
      expect(got).toEqual(['x'.repeat(64)]);
      for (const withLength of [true, false]) {
        const res = await upload('y'.repeat(65), withLength);
        expect(res.statusCode, `withLength ${withLength}`).toBe(413);
        expect(header(res, 'content-type')).toBe('application/problem+json');
        expect(JSON.parse(res.body)).toMatchObject({ type: 'urn:edge-limiter:problem:payload-too-large' });
      }
      expect(got).toHaveLength(1);
    } finally {
      await new Promise<void>((r) => origin.close(() => r()));
    }
  });

  it('TRACE, TRACK and CONNECT get 501 problem+json in each event shape (the adapter cannot build them), and reach no origin', async () => {
    let originHits = 0;
    const origin = createServer((_req, res) => (originHits++, res.end('origin')));
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', () => r()));
    try {
      const handler = await loadHandler({ ...ENV, GATE_ORIGIN: `http://127.0.0.1:${(origin.address() as AddressInfo).port}` });
      for (const name of ['apigw-v1', 'apigw-v2', 'function-url', 'alb', 'alb-multi']) {
        for (const method of ['TRACE', 'TRACK', 'CONNECT', 'trace']) {
          const event = fixture(name);
          if (event.requestContext.http) event.requestContext.http.method = method;
          else event.httpMethod = method;
          const res = await handler(event, context);
          expect(res.statusCode, `${name} ${method}`).toBe(501);
          expect(header(res, 'content-type')).toBe('application/problem+json');
          const body = JSON.parse(res.isBase64Encoded ? Buffer.from(res.body, 'base64').toString() : res.body);
          expect(body).toMatchObject({ type: 'urn:edge-limiter:problem:method-not-implemented', status: 501 });
          // The result has the shape of its event kind (REST API v1 answers in multiValueHeaders).
          expect(res.multiValueHeaders !== undefined, name).toBe(fixture(name).multiValueHeaders !== undefined);
        }
      }
      expect(originHits).toBe(0);
    } finally {
      await new Promise<void>((r) => origin.close(() => r()));
    }
  });

  it('the client IP helper sees each event source’s address', async () => {
    const app = new Hono();
    app.all('*', (c) => c.text(clientIp(c) ?? 'none'));
    const h = handle(app);
    const expected: Record<string, string> = { 'apigw-v1': '203.0.113.10', 'apigw-v2': '198.51.100.7', 'function-url': '192.0.2.44', alb: '72.12.164.125', 'alb-multi': '72.12.164.125' };
    for (const [name, ip] of Object.entries(expected)) {
      const res = (await h(fixture(name), context)) as LambdaResult;
      const text = res.isBase64Encoded ? Buffer.from(res.body, 'base64').toString() : res.body;
      expect(text).toBe(ip);
    }
  });
});
