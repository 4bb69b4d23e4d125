// The deployed app (functions/app: what the Node server, the Worker and Lambda serve) routes a path
// exactly, as the library's permitApp does: a trailing slash, or an empty segment where a policy or a key
// belongs, reaches no other route. Review 5, H1: its router (PatternRouter) took `PUT /v1/limits/free/`
// for `PUT /v1/limits/{policy}`, so a curl line with an empty $KEY, or a client's key "." (which a URL
// parser drops), changed every key of the policy. Checked on buildApp against permitApp route by route,
// and on the Node server with raw request lines (no client normalizes them first).
import { connect } from 'node:net';
import { Hono } from 'hono';
import { HonoBase } from 'hono/hono-base';
import { UnsupportedPathError } from 'hono/router';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../functions/app/app.js';
import { StrictPatternRouter } from '../../functions/app/router.js';
import { loadConfig } from '../../functions/app/env.js';
import { createLimiter, memoryStore } from '../../src/index.js';
import { permitApp } from '../../src/http/permit-app.js';
import { startLoggingOrigin, type LoggingOrigin } from '../support/logging-origin.js';
import { startNodeServer, type NodeServer } from '../support/node-server.js';

const TOKEN = 'strict-routes-token';
const POLICIES = { free: { capacity: 5, refillPerSecond: 1 / 3600 } };
const auth = { Authorization: `Bearer ${TOKEN}` };
const json = (method: string, body: unknown): RequestInit => ({ method, headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
/** What an empty $KEY, a key "." or "..", or `%2e` leave of a key's path once a URL parser has resolved them. */
const LEFT_OF_A_KEY = ['/v1/limits/free/', '/v1/limits/free/.', '/v1/limits/free/%2e', '/v1/limits/free/%2E', '/v1/limits/free/k/..', '/v1/limits/free/k/%2e%2e'];
const WIDE = { capacity: 3, refill: '3/hour' };
const MORE = { capacity: 1000, refill: '1000/second' };

function deployed(env: Record<string, string> = {}) {
  const logs: Record<string, unknown>[] = [];
  const config = loadConfig({ LIMITER_POLICIES: JSON.stringify(POLICIES), PERMIT_TOKENS: TOKEN, ...env });
  const built = buildApp(config, memoryStore(), { log: (level, line) => logs.push({ level, ...line }), openApiJson: '{}' });
  return { ...built, audits: () => logs.filter((l) => l.msg === 'audit') };
}

/** Takes on a fresh key until one is refused: what the numbers in force admit at once. */
async function admittedAtOnce(take: () => Promise<boolean>): Promise<number> {
  let n = 0;
  while (n < 20 && (await take())) n++;
  return n;
}

describe('StrictPatternRouter', () => {
  it('matches each kind of route as Hono\'s default router does: a trailing slash only where the route has one', async () => {
    const routes = ['/', '/a', '/a/', '/a/:id', '/a/:id/b', '/k/:p/:key{[\\s\\S]+}', '/w/*', '*'];
    const paths = ['/', '/a', '/a/', '/a/1', '/a/1/', '/a/1/b', '/a/1/b/', '/k/p/x', '/k/p/x/', '/k/p/', '/k//x', '/w', '/w/', '/w/x', '/wx', '/other'];
    const answer = async (app: Hono, route: string, path: string) => {
      app.get(route, (c) => c.json(Object.entries(c.req.param()).sort()));
      const res = await app.request(path);
      return `${route} ${path}: ${res.status} ${res.status === 200 ? await res.text() : ''}`;
    };
    const strict: string[] = [];
    for (const route of routes) {
      for (const path of paths) {
        const got = await answer(new HonoBase({ router: new StrictPatternRouter() }) as Hono, route, path);
        expect(got).toBe(await answer(new Hono(), route, path));
        strict.push(got);
      }
    }
    expect(strict).toContain('/a/:id /a/1/: 404 ');
    expect(strict).toContain('/a/ /a/: 200 []');
  });

  it('refuses an optional parameter when the route is added, rather than route it another way', () => {
    expect(() => new StrictPatternRouter().add('GET', '/opt/:x?', 'h')).toThrow(UnsupportedPathError);
  });
});

describe('the deployed app routes a path exactly, as permitApp does', () => {
  it('every route family, with a trailing slash or an empty segment where a policy or key belongs: the same answer as permitApp (404 problem+json where it has no route)', async () => {
    const paths = [
      '/healthz/', '/v1/openapi.json/', '/v1/permits/', '/v1/adjustments/', '/v1/stats/',
      '/v1/limits/', '/v1/limits//', '/v1/limits/free/', '/v1/limits//k', '/v1/limits//free', ...LEFT_OF_A_KEY,
      '/v1/blocks/', '/v1/blocks/free', '/v1/blocks/free/', '/v1/blocks//k',
      '/v1/buckets/', '/v1/buckets/free', '/v1/buckets/free/', '/v1/buckets//k',
    ];
    for (const path of paths) {
      for (const method of ['GET', 'PUT', 'DELETE', 'POST']) {
        const body = method === 'PUT' ? (path.startsWith('/v1/blocks') ? { forMs: 60_000 } : MORE) : method === 'POST' ? { policy: 'free', key: 'k' } : undefined;
        const init = body === undefined ? { method, headers: auth } : json(method, body);
        const library = permitApp({ limiter: createLimiter({ store: memoryStore(), policies: POLICIES }), tokens: [TOKEN], log: () => {} });
        const want = await library.request(path, init);
        const got = await deployed().app.request(path, init);
        const wantBody = (await want.json()) as { type?: string };
        const gotBody = (await got.json()) as { type?: string };
        expect(`${method} ${path}: ${got.status} ${gotBody.type}`).toBe(`${method} ${path}: ${want.status} ${wantBody.type}`);
        expect(want.status, `${method} ${path}`).toBe(404);
        expect(got.headers.get('content-type')).toBe('application/problem+json');
      }
    }
  });

  it('PUT and DELETE /v1/limits/free/ (and what a dot segment leaves) answer 404 and leave the policy-wide change as it was: no audit line', async () => {
    const { app, limiter, audits } = deployed();
    expect((await app.request('/v1/limits/free', json('PUT', WIDE))).status).toBe(200);
    for (const path of LEFT_OF_A_KEY) {
      const put = await app.request(path, json('PUT', MORE));
      expect(put.status, `PUT ${path}`).toBe(404);
      expect(await put.json()).toMatchObject({ type: 'urn:edge-limiter:problem:not-found', status: 404 });
      const del = await app.request(path, { method: 'DELETE', headers: auth });
      expect(del.status, `DELETE ${path}`).toBe(404);
      expect((await app.request(path, { headers: auth })).status, `GET ${path}`).toBe(404);
    }
    expect(await (await app.request('/v1/limits/free', { headers: auth })).json()).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 3 }] });
    expect(audits()).toHaveLength(1);
    expect(await admittedAtOnce(async () => (await limiter.take('free', 'another-customer')).allowed)).toBe(3);
  });

  it('gateway mode: a path outside /v1 with a trailing slash is still forwarded; /v1/limits/free/ is not, and changes nothing', async () => {
    const origin: LoggingOrigin = await startLoggingOrigin();
    try {
      const { app, audits } = deployed({ GATE_ORIGIN: origin.url, GATE_POLICY: 'free', GATE_KEY: 'header:x-api-key' });
      expect((await app.request('/page/', { headers: { 'x-api-key': 'a' } })).status).toBe(200);
      expect((await app.request('/v1/limits/free/', json('PUT', MORE))).status).toBe(404);
      expect(origin.requests.map((r) => r.path)).toEqual(['/page/']);
      expect(audits()).toHaveLength(0);
    } finally {
      await origin.close();
    }
  });
});

describe('the Node server (functions/node.ts), raw request lines', () => {
  let server: NodeServer;
  beforeAll(async () => {
    server = await startNodeServer({ LIMITER_STORE: 'memory', LIMITER_POLICIES: JSON.stringify(POLICIES), PERMIT_TOKENS: TOKEN });
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
  });

  /** One request, written as it is on its own connection; the status and the body of the answer. */
  const raw = (method: string, path: string, body = '') =>
    new Promise<{ status: number; type: string; body: string }>((resolve, reject) => {
      const socket = connect(server.port, '127.0.0.1', () => {
        const head = [`${method} ${path} HTTP/1.1`, 'Host: limits.test', `Authorization: Bearer ${TOKEN}`, 'Connection: close'];
        if (body !== '') head.push('Content-Type: application/json', `Content-Length: ${Buffer.byteLength(body)}`);
        socket.write(`${head.join('\r\n')}\r\n\r\n${body}`);
      });
      let data = '';
      socket.on('data', (d: Buffer) => (data += d.toString('latin1')));
      socket.on('error', reject);
      socket.on('close', () => {
        const [head = '', rest = ''] = data.split('\r\n\r\n', 2);
        resolve({ status: Number(head.split(' ')[1]), type: /content-type: ([^\r]+)/i.exec(head)?.[1] ?? '', body: rest });
      });
    });

  it('PUT and DELETE /v1/limits/free/ (and /v1/limits/free/., %2e, k/..): 404 problem+json; the policy-wide change stands, no audit line', async () => {
    expect((await raw('PUT', '/v1/limits/free', JSON.stringify(WIDE))).status).toBe(200);
    for (const path of LEFT_OF_A_KEY) {
      for (const [method, body] of [['PUT', JSON.stringify(MORE)], ['DELETE', '']] as const) {
        const res = await raw(method, path, body);
        expect(res.status, `${method} ${path}`).toBe(404);
        expect(res.type).toBe('application/problem+json');
        expect(JSON.parse(res.body)).toMatchObject({ type: 'urn:edge-limiter:problem:not-found' });
      }
    }
    const wide = await raw('GET', '/v1/limits/free');
    expect(JSON.parse(wide.body)).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 3 }] });
    const takes = async () => (await raw('POST', '/v1/permits', JSON.stringify({ policy: 'free', key: 'another-customer' }))).status === 200;
    expect(await admittedAtOnce(takes)).toBe(3);
    // One audit line: the change above; none from the refused requests.
    expect(server.output().split('\n').filter((l) => l.includes('"msg":"audit"'))).toHaveLength(1);
  });
});
