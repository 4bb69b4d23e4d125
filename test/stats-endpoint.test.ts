// GET /v1/stats on the deployable app (what the Node, Lambda and Worker entries serve): the bearer check of
// every /v1 route, the snapshot's shape and counts after known traffic, LIMITER_TOP_KEYS (0 keeps no key,
// bad values are a ConfigError naming it), keys as the gateway's limiter saw them.
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';
import { buildApp } from '../functions/app/app.js';
import { loadConfig } from '../functions/app/env.js';
import { ConfigError, createLimiter, memoryStore } from '../src/index.js';
import { checked } from './support/openapi-contract.js';
import { checkStatsContract, expectUnauthorized, STATS_POLICIES } from './support/stats-contract.js';

const TOKEN = 'stats-token';

function app(env: Record<string, string> = {}) {
  const built = buildApp(loadConfig({ LIMITER_POLICIES: STATS_POLICIES, PERMIT_TOKENS: TOKEN, ...env }), memoryStore(), { log: () => {} });
  return { ...built, app: checked(built.app) };
}

describe('GET /v1/stats', () => {
  it('401 without a valid token; after known traffic, every outcome counted and the refused keys ranked', async () => {
    const { app: a } = app();
    await checkStatsContract((path, init) => Promise.resolve(a.request(path, init)), TOKEN);
  });

  it('with no PERMIT_TOKENS configured it answers 401 like every /v1 route', async () => {
    const { app: a } = app({ PERMIT_TOKENS: '' });
    await expectUnauthorized(await a.request('/v1/stats', { headers: { Authorization: 'Bearer anything' } }));
  });

  it('LIMITER_TOP_KEYS=0 keeps no key (the counters stay); LIMITER_TOP_KEYS=1 keeps one', async () => {
    for (const [topKeys, kept] of [
      ['0', 0],
      ['1', 1],
    ] as const) {
      const { app: a, stats } = app({ LIMITER_TOP_KEYS: topKeys });
      const auth = { Authorization: `Bearer ${TOKEN}` };
      for (const key of ['secret-a', 'secret-a', 'secret-a', 'secret-b', 'secret-b', 'secret-b', 'secret-b']) {
        await a.request('/v1/permits', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify({ policy: 'api', key }) });
      }
      const text = await (await a.request('/v1/stats', { headers: auth })).text();
      const body = JSON.parse(text);
      expect(body.topKeys).toBe(kept);
      expect(body.policies.api.decisions).toMatchObject({ allowed: 4, denied: 3 });
      expect(body.policies.api.refused).toBe(3);
      expect(body.policies.api.topRefused.map((e: { key: string }) => e.key)).toEqual(kept === 0 ? [] : ['secret-b']);
      if (kept === 0) {
        expect(text).not.toContain('secret-');
        expect(JSON.stringify(stats.snapshot())).not.toContain('secret-');
      }
    }
  });

  it('a LIMITER_TOP_KEYS that is not an integer from 0 to 10000 is a ConfigError naming it', () => {
    expect(loadConfig({}).stats).toEqual({ topKeys: 100 });
    expect(loadConfig({ LIMITER_TOP_KEYS: '10000' }).stats).toEqual({ topKeys: 10_000 });
    for (const bad of ['-1', '1.5', '10001', 'lots', '1e3', ' 5']) {
      expect(() => loadConfig({ LIMITER_TOP_KEYS: bad }), bad).toThrow(ConfigError);
      expect(() => loadConfig({ LIMITER_TOP_KEYS: bad }), bad).toThrow(/invalid config: LIMITER_TOP_KEYS must be an integer from 0 to 10000/);
    }
  });

  it('a policy named __proto__ is refused (ConfigError naming it), not hidden from the stats; constructor and toString are counted like any name', async () => {
    const raw = '{"__proto__":{"capacity":2,"refillPerSecond":0.001}}';
    // JSON.parse makes __proto__ an own key, and loadConfig passes it on: the limiter is what refuses it.
    const config = loadConfig({ LIMITER_POLICIES: raw, PERMIT_TOKENS: TOKEN });
    expect(Object.hasOwn(config.policies, '__proto__')).toBe(true);
    let thrown: unknown;
    try {
      buildApp(config, memoryStore(), { log: () => {} });
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as ConfigError).message).toMatch(/invalid config: LIMITER_POLICIES\["__proto__"\] name must not be "__proto__": policy names are keys of JSON objects/);
    expect(() => createLimiter({ store: memoryStore(), policies: { ['__proto__']: { capacity: 2, refillPerSecond: 1 } } })).toThrow(/policies\["__proto__"\] name must not be "__proto__"/);

    // The names Object.prototype has otherwise are plain keys in the snapshot.
    const { app: a } = app({ LIMITER_POLICIES: '{"constructor":{"capacity":1,"refillPerSecond":0.001},"toString":{"capacity":5,"refillPerSecond":1}}' });
    const auth = { Authorization: `Bearer ${TOKEN}` };
    for (const policy of ['constructor', 'constructor', 'toString']) {
      await a.request('/v1/permits', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify({ policy, key: 'k' }) });
    }
    const body = JSON.parse(await (await a.request('/v1/stats', { headers: auth })).text());
    expect(Object.keys(body.policies).sort()).toEqual(['constructor', 'toString']);
    expect(body.policies.constructor.decisions).toMatchObject({ allowed: 1, denied: 1 });
    expect(body.policies.toString.decisions).toMatchObject({ allowed: 1, denied: 0 });
  });

  it('in gateway mode the refused keys are the limiter\'s: the SHA-256 of GATE_KEY=header:<name>, never the value', async () => {
    // Port 9 (discard) refuses connections: allowed requests get 502 from the gateway, which is beside the point.
    const { app: a } = app({ GATE_ORIGIN: 'http://127.0.0.1:9', GATE_POLICY: 'api', GATE_KEY: 'header:x-api-key' });
    const secret = 'sk-live-0123456789';
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await a.request('/anything', { headers: { 'x-api-key': secret } })).status);
    expect(statuses.slice(2)).toEqual([429]);
    const text = await (await a.request('/v1/stats', { headers: { Authorization: `Bearer ${TOKEN}` } })).text();
    const digest = Buffer.from(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(secret))).toString('base64url');
    expect(JSON.parse(text).policies.api.topRefused).toMatchObject([{ key: digest, count: 1 }]);
    expect(text).not.toContain(secret);
  });
});

describe('GET /v1/stats on the Lambda entry', () => {
  const context = { awsRequestId: 'req-1', functionName: 'edge-limiter', getRemainingTimeInMillis: () => 3000 } as never;
  const fixture = () => JSON.parse(readFileSync(new URL('./fixtures/lambda/apigw-v2.json', import.meta.url), 'utf8'));

  it('401 without the token, the counts with it', async () => {
    vi.resetModules();
    for (const k of ['LIMITER_STORE', 'REDIS_URL', 'UPSTASH_REDIS_REST_URL', 'MONGODB_URI', 'GATE_ORIGIN', 'LIMITER_TOP_KEYS']) delete process.env[k];
    Object.assign(process.env, { LIMITER_POLICIES: STATS_POLICIES, PERMIT_TOKENS: 'lambda-token' });
    const handler = (await import('../functions/lambda/memory.js')).handler as unknown as (e: unknown, c: unknown) => Promise<{ statusCode: number; body: string; headers?: Record<string, string> }>;
    const permit = fixture();
    permit.body = Buffer.from(JSON.stringify({ policy: 'api', key: 'lambda-user' })).toString('base64');
    const codes = [];
    for (let i = 0; i < 3; i++) codes.push((await handler(structuredClone(permit), context)).statusCode);
    expect(codes).toEqual([200, 200, 429]);
    const get = (authorization?: string) => {
      const e = fixture();
      Object.assign(e, { rawPath: '/v1/stats', body: undefined, isBase64Encoded: false });
      e.requestContext.http.method = 'GET';
      e.requestContext.http.path = '/v1/stats';
      delete e.headers['content-type'];
      delete e.headers['content-length'];
      if (authorization) e.headers.authorization = authorization;
      else delete e.headers.authorization;
      return handler(e, context);
    };
    const refused = await get();
    expect(refused.statusCode).toBe(401);
    expect(JSON.parse(refused.body)).toMatchObject({ type: 'urn:edge-limiter:problem:unauthorized' });
    const ok = await get('Bearer lambda-token');
    expect(ok.statusCode).toBe(200);
    const body = JSON.parse(ok.body);
    expect(body.policies.api.decisions).toEqual({ allowed: 2, denied: 1, store_error: 0, deny_cache: 0, lease: 0, local: 0, blocked: 0 });
    expect(body.policies.api.topRefused).toMatchObject([{ key: 'lambda-user', count: 1, error: 0 }]);
  });
});
