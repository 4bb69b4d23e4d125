// The OpenAPI document (src/http/openapi.ts, kept as openapi.json) against the server it describes:
// - the linter passes (Redocly's recommended-strict rules, redocly.yaml), and openapi.json is the document;
// - GET /v1/openapi.json serves it without a token and names no configured policy;
// - a route on one side only fails: the app's routes and the document's operations are the same set;
// - a request field on one side only fails: the fields the server accepts are the schemas' properties;
// - a response or a field on one side only fails: a corpus of real requests (every documented status of
//   every operation) is checked response by response against the document, whose objects forbid
//   undocumented fields, and every documented response and field must show up in it.
// test/http/permit.test.ts, multi-limit.test.ts, idempotency.test.ts and auth.test.ts also check every
// response they receive (test/support/openapi-contract.ts `checked`).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../../functions/app/app.js';
import { loadConfig } from '../../functions/app/env.js';
import { ADJUST_FIELDS, FIELDS, SETTLE_FIELDS } from '../../src/http/permit-app.js';
import { BLOCK_FIELDS, LIMITS_FIELDS } from '../../src/http/limits-routes.js';
import { openApiDocument, openApiJson } from '../../src/http/openapi.js';
import { ROUTE_RIGHTS } from '../../src/http/auth.js';
import type { Store } from '../../src/store.js';
import { memoryStore } from '../../src/stores/memory.js';
import { checked, recorder } from '../support/openapi-contract.js';
import { switchableStore } from '../support/switchable-store.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const TOKEN = 'openapi-token-0001';
const doc = openApiDocument as unknown as { paths: Record<string, Record<string, { responses: Record<string, unknown> }>>; components: { schemas: Record<string, { properties?: Record<string, { properties?: object }> }> } };
const POLICIES = {
  api: { capacity: 2, refillPerSecond: 0.001 },
  multi: { limits: { burst: { capacity: 2, refillPerSecond: 1 }, daily: { capacity: 100, refillPerSecond: 0.001 } } },
  failsOpen: { capacity: 5, refillPerSecond: 1, onStoreError: 'allow' },
};

/** A store that can be switched off, its ping and reset included (so /healthz and DELETE see it). */
function store(): Store & { down: boolean } {
  const s = switchableStore();
  const reset = s.reset;
  return Object.assign(s, {
    ping: async () => {
      if (s.down) throw new Error('ECONNREFUSED');
    },
    reset: async (key: string) => {
      if (s.down) throw new Error('ECONNREFUSED');
      return reset(key);
    },
  });
}

function app(s: Store, env: Record<string, string> = {}) {
  return buildApp(loadConfig({ LIMITER_POLICIES: JSON.stringify(POLICIES), PERMIT_TOKENS: TOKEN, LIMITER_CIRCUIT_BREAKER: 'off', ...env }), s, { log: () => {}, openApiJson }).app;
}

const auth = { Authorization: `Bearer ${TOKEN}` };
const put = (path: string, body: unknown, headers: Record<string, string> = auth): [string, RequestInit] => [
  path,
  { method: 'PUT', headers: { ...headers, 'Content-Type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) },
];
const post = (path: string, body: unknown, headers: Record<string, string> = {}): [string, RequestInit] => [
  path,
  { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) },
];

describe('the OpenAPI document', () => {
  it('passes the linter, and openapi.json is the document', () => {
    expect(readFileSync(`${root}openapi.json`, 'utf8')).toBe(openApiJson);
    const out = execFileSync(process.execPath, [`${root}node_modules/@redocly/cli/bin/cli.js`, 'lint', '--config', `${root}redocly.yaml`, `${root}openapi.json`], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' } });
    expect(out).not.toMatch(/warning|error/i);
  });

  it('is served at GET /v1/openapi.json without a token, and names no configured policy', async () => {
    const a = app(store());
    const res = await a.request('/v1/openapi.json');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    const text = await res.text();
    expect(text).toBe(openApiJson);
    for (const name of [...Object.keys(POLICIES), 'burst', 'daily', TOKEN]) expect(text).not.toContain(`"${name}"`);
    expect((await a.request('/v1/openapi.json', { method: 'POST', headers: auth })).status).toBe(405);
  });

  it('states the right of every /v1 operation but its own, as auth.ts\'s table gives it, and documents its 403', () => {
    const stated: Record<string, unknown> = {};
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        if (method === 'parameters' || !path.startsWith('/v1/') || path === '/v1/openapi.json') continue;
        stated[`${method.toUpperCase()} ${path}`] = (op as Record<string, unknown>)['x-required-right'];
        expect(op.responses['403'], `${method} ${path}`).toBeDefined();
      }
    }
    const table: Record<string, unknown> = { ...ROUTE_RIGHTS };
    delete table['POST /v1/adjustments with a charge'];
    table['POST /v1/adjustments'] = [ROUTE_RIGHTS['POST /v1/adjustments with a charge'], ROUTE_RIGHTS['POST /v1/adjustments']];
    expect(stated).toEqual(table);
  });

  it("has exactly the app's routes: one on either side only fails", () => {
    const a = app(store(), { GATE_ORIGIN: 'http://origin.test', GATE_POLICY: 'api' });
    const served = new Set(
      a.routes
        .filter((r) => r.method !== 'ALL')
        .map((r) => `${r.method} ${r.path.replace(/:(\w+)(\{[^/]*\})?/g, '{$1}')}`),
    );
    const documented = new Set(Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).filter((m) => m !== 'parameters').map((m) => `${m.toUpperCase()} ${path}`)));
    expect([...served].sort()).toEqual([...documented].sort());
  });

  it("describes exactly the request fields the server accepts", () => {
    expect(Object.keys(doc.components.schemas.PermitRequest!.properties!).sort()).toEqual([...FIELDS].sort());
    expect(Object.keys(doc.components.schemas.AdjustmentRequest!.properties!).sort()).toEqual([...new Set([...ADJUST_FIELDS, ...SETTLE_FIELDS])].sort());
    expect(Object.keys(doc.components.schemas.LimitsRequest!.properties!).sort()).toEqual([...LIMITS_FIELDS].sort());
    expect(Object.keys(doc.components.schemas.BlockRequest!.properties!).sort()).toEqual([...BLOCK_FIELDS].sort());
  });

  it('every documented response and field shows up in real responses, and every response matches', async () => {
    const rec = recorder();
    const s = store();
    // TOKEN has every right; NARROW may only take permits of multi (each 403 below).
    const tokens = [
      { name: 'all', secret: TOKEN, policies: '*', rights: ['permit', 'settle', 'admin', 'stats'] },
      { name: 'narrow', secret: 'narrow-token-0001', policies: ['multi'], rights: ['permit'] },
    ];
    const narrow = { Authorization: 'Bearer narrow-token-0001' };
    const a = checked(app(s, { LIMITER_TOP_KEYS: '5', PERMIT_TOKENS: JSON.stringify(tokens) }), rec);
    const send = (path: string, init?: RequestInit) => a.request(path, init);
    const expectStatus = async (status: number, path: string, init?: RequestInit) => {
      const res = await send(path, init);
      expect(res.status, `${init?.method ?? 'GET'} ${path}`).toBe(status);
      return res;
    };

    // /v1/permits
    await expectStatus(200, ...post('/v1/permits', { policy: 'api', key: 'k' }));
    await expectStatus(200, ...post('/v1/permits', { policy: 'api', key: 'k', cost: 1, maxWaitMs: 0 }, { 'Idempotency-Key': '"take-1"' }));
    const repeat = await (await expectStatus(200, ...post('/v1/permits', { policy: 'api', key: 'k', cost: 1, maxWaitMs: 0 }, { 'Idempotency-Key': '"take-1"' }))).json();
    expect(repeat.repeated).toBe(true);
    await expectStatus(429, ...post('/v1/permits', { policy: 'api', key: 'k' }));
    await expectStatus(200, ...post('/v1/permits', { policy: 'multi', key: 'm', cost: { burst: 2 } }));
    const refused = await (await expectStatus(429, ...post('/v1/permits', { policy: 'multi', key: 'm', cost: { burst: 1, daily: 1 } }))).json();
    expect(refused.refusedBy).toEqual(['burst']);
    await expectStatus(200, ...post('/v1/permits', { policy: 'multi', key: 'm', maxWaitMs: 5000 }));
    await expectStatus(400, ...post('/v1/permits', '{'));
    await expectStatus(400, ...post('/v1/permits', { policy: 'api', key: '' }));
    await expectStatus(400, ...post('/v1/permits', { policy: 'multi', key: 'm', cost: { hourly: 1 } }));
    await expectStatus(401, '/v1/permits', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
    await expectStatus(403, ...post('/v1/permits', { policy: 'api', key: 'k' }, narrow));
    await expectStatus(404, ...post('/v1/permits', { policy: 'nope', key: 'k' }));
    await expectStatus(413, ...post('/v1/permits', JSON.stringify({ policy: 'api', key: 'x'.repeat(9000) })));
    await expectStatus(415, '/v1/permits', { method: 'POST', headers: { ...auth, 'Content-Type': 'text/plain' }, body: '{}' });
    await expectStatus(422, ...post('/v1/permits', { policy: 'api', key: 'k', cost: 2 }, { 'Idempotency-Key': 'take-1' }));

    // /v1/adjustments
    await expectStatus(200, ...post('/v1/adjustments', { policy: 'api', key: 'k', cost: -1 }, { 'Idempotency-Key': 'adjust-1' }));
    await expectStatus(200, ...post('/v1/adjustments', { policy: 'multi', key: 'm', cost: { daily: 5 } }));
    await expectStatus(400, ...post('/v1/adjustments', { policy: 'api', key: 'k', cost: 0 }));
    // A settlement of a take's charge (its Idempotency-Key, answered back as `charge`), once.
    await expectStatus(200, ...post('/v1/permits', { policy: 'api', key: 'settled', cost: 2 }, { 'Idempotency-Key': 'charge-1' }));
    await expectStatus(200, ...post('/v1/adjustments', { policy: 'api', key: 'settled', charge: 'charge-1', cost: 0 }));
    await expectStatus(409, ...post('/v1/adjustments', { policy: 'api', key: 'settled', charge: 'charge-1', cost: 1 }));
    await expectStatus(404, ...post('/v1/adjustments', { policy: 'api', key: 'settled', charge: 'no-such-charge', cost: 0 }));
    await expectStatus(400, ...post('/v1/adjustments', { policy: 'api', key: 'settled', charge: 'charge-1', cost: -1 }));
    await expectStatus(400, ...post('/v1/adjustments', '[1'));
    await expectStatus(401, '/v1/adjustments', { method: 'POST', headers: { Authorization: 'Bearer wrong', 'Content-Type': 'application/json' }, body: '{}' });
    await expectStatus(403, ...post('/v1/adjustments', { policy: 'multi', key: 'm', cost: 1 }, narrow));
    await expectStatus(404, ...post('/v1/adjustments', { policy: 'nope', key: 'k', cost: 1 }));
    await expectStatus(413, ...post('/v1/adjustments', JSON.stringify({ policy: 'api', key: 'k', cost: 1, pad: 'x'.repeat(9000) })));
    await expectStatus(415, '/v1/adjustments', { method: 'POST', headers: auth, body: '{}' });
    await expectStatus(422, ...post('/v1/adjustments', { policy: 'api', key: 'k', cost: -2 }, { 'Idempotency-Key': 'adjust-1' }));

    // /v1/buckets/{policy}/{key}
    await expectStatus(200, '/v1/buckets/api/k', { headers: auth });
    await expectStatus(200, '/v1/buckets/multi/m', { headers: auth });
    await expectStatus(400, `/v1/buckets/api/${'%F0%9F%98%80'.repeat(200)}`, { headers: auth });
    await expectStatus(401, '/v1/buckets/api/k');
    await expectStatus(403, '/v1/buckets/api/k', { headers: narrow });
    await expectStatus(404, '/v1/buckets/nope/k', { headers: auth });
    await expectStatus(204, '/v1/buckets/api/k', { method: 'DELETE', headers: auth });
    await expectStatus(400, `/v1/buckets/api/${'%F0%9F%98%80'.repeat(200)}`, { method: 'DELETE', headers: auth });
    await expectStatus(401, '/v1/buckets/api/k', { method: 'DELETE' });
    await expectStatus(403, '/v1/buckets/multi/m', { method: 'DELETE', headers: narrow });
    await expectStatus(404, '/v1/buckets/nope/k', { method: 'DELETE', headers: auth });

    // /v1/limits/{policy}/{key}, /v1/limits/{policy}, /v1/blocks/{policy}/{key}
    const badKey = `${'%F0%9F%98%80'.repeat(200)}`;
    const set = await (await expectStatus(200, ...put('/v1/limits/api/lk', { capacity: 5, refillPerSecond: 1, expiresInMs: 60_000 }))).json();
    expect(set).toMatchObject({ policy: 'api', key: 'lk', source: 'key', expiresInMs: 60_000, previous: { source: 'policy' } });
    const inForce = await (await expectStatus(200, ...post('/v1/permits', { policy: 'api', key: 'lk' }))).json();
    expect(inForce).toMatchObject({ limit: 5, remaining: 4, limitsInForce: [{ name: 'api', capacity: 5, refillPerSecond: 1 }] });
    await expectStatus(200, '/v1/limits/api/lk', { headers: auth });
    await expectStatus(400, ...put('/v1/limits/api/lk', { capacity: 0, refillPerSecond: 1 }));
    await expectStatus(400, ...put('/v1/limits/api/lk', '{'));
    await expectStatus(400, `/v1/limits/api/${badKey}`, { headers: auth });
    await expectStatus(400, `/v1/limits/api/${badKey}`, { method: 'DELETE', headers: auth });
    await expectStatus(401, '/v1/limits/api/lk');
    await expectStatus(401, ...put('/v1/limits/api/lk', { capacity: 5, refillPerSecond: 1 }, {}));
    await expectStatus(401, '/v1/limits/api/lk', { method: 'DELETE' });
    await expectStatus(404, '/v1/limits/nope/lk', { headers: auth });
    await expectStatus(404, ...put('/v1/limits/nope/lk', { capacity: 5, refillPerSecond: 1 }));
    await expectStatus(404, '/v1/limits/nope/lk', { method: 'DELETE', headers: auth });
    await expectStatus(200, '/v1/limits/api/lk', { method: 'DELETE', headers: auth });
    await expectStatus(200, ...put('/v1/limits/multi', { limits: { daily: { capacity: 200, refill: '200/day' } }, expiresInMs: 60_000 }));
    await expectStatus(200, '/v1/limits/multi', { headers: auth });
    await expectStatus(400, ...put('/v1/limits/multi', { limits: { hourly: { capacity: 1, refillPerSecond: 1 } } }));
    await expectStatus(401, '/v1/limits/multi');
    await expectStatus(401, ...put('/v1/limits/multi', { limits: {} }, {}));
    await expectStatus(401, '/v1/limits/multi', { method: 'DELETE' });
    await expectStatus(404, '/v1/limits/nope', { headers: auth });
    await expectStatus(404, ...put('/v1/limits/nope', { capacity: 1, refillPerSecond: 1 }));
    await expectStatus(404, '/v1/limits/nope', { method: 'DELETE', headers: auth });
    await expectStatus(200, '/v1/limits/multi', { method: 'DELETE', headers: auth });
    const blocked = await (await expectStatus(200, ...put('/v1/blocks/api/bk', { forMs: 60_000 }))).json();
    expect(blocked).toMatchObject({ blockedForMs: 60_000, previous: { source: 'policy' } });
    const refusedBlocked = await expectStatus(429, ...post('/v1/permits', { policy: 'api', key: 'bk' }));
    expect(refusedBlocked.headers.get('x-ratelimit-reason')).toBe('blocked');
    expect(refusedBlocked.headers.get('retry-after')).toBe('60');
    const blockedBody = await refusedBlocked.json();
    expect(blockedBody).toMatchObject({ allowed: false, reason: 'blocked' });
    expect(blockedBody.retryAfterMs).toBeGreaterThan(59_000);
    await expectStatus(400, ...put('/v1/blocks/api/bk', {}));
    await expectStatus(400, ...put('/v1/blocks/api/bk', { forMs: -1 }));
    await expectStatus(401, ...put('/v1/blocks/api/bk', { forMs: 1 }, {}));
    await expectStatus(404, ...put('/v1/blocks/nope/bk', { forMs: 1 }));
    await expectStatus(200, '/v1/blocks/api/bk', { method: 'DELETE', headers: auth });
    await expectStatus(400, `/v1/blocks/api/${badKey}`, { method: 'DELETE', headers: auth });
    await expectStatus(401, '/v1/blocks/api/bk', { method: 'DELETE' });
    await expectStatus(404, '/v1/blocks/nope/bk', { method: 'DELETE', headers: auth });
    await expectStatus(405, '/v1/blocks/api/bk', { headers: auth });
    // A token without admin (on multi), and one outside its policies (api): 403, nothing changed.
    for (const policy of ['multi', 'api']) {
      await expectStatus(403, `/v1/limits/${policy}/k`, { headers: narrow });
      await expectStatus(403, ...put(`/v1/limits/${policy}/k`, { capacity: 5, refillPerSecond: 1 }, narrow));
      await expectStatus(403, `/v1/limits/${policy}/k`, { method: 'DELETE', headers: narrow });
      await expectStatus(403, `/v1/limits/${policy}`, { headers: narrow });
      await expectStatus(403, ...put(`/v1/limits/${policy}`, { capacity: 5, refillPerSecond: 1 }, narrow));
      await expectStatus(403, `/v1/limits/${policy}`, { method: 'DELETE', headers: narrow });
      await expectStatus(403, ...put(`/v1/blocks/${policy}/k`, { forMs: 1000 }, narrow));
      await expectStatus(403, `/v1/blocks/${policy}/k`, { method: 'DELETE', headers: narrow });
    }
    expect(await (await send('/v1/limits/api/k', { headers: auth })).json()).toMatchObject({ source: 'policy' });

    // /v1/stats, /v1/openapi.json, /healthz, and what no operation documents (still problem+json)
    await expectStatus(200, '/v1/stats', { headers: auth });
    await expectStatus(401, '/v1/stats');
    await expectStatus(403, '/v1/stats', { headers: narrow });
    await expectStatus(200, '/v1/openapi.json');
    await expectStatus(200, '/healthz');
    await expectStatus(404, '/v1/nothing-here', { headers: auth });
    await expectStatus(405, '/v1/permits', { method: 'GET', headers: auth });
    await expectStatus(405, '/v1/openapi.json', { method: 'POST' });
    await expectStatus(405, '/healthz', { method: 'POST' });
    await expectStatus(400, ...post('/v1/permits', { policy: 'api', key: 'k', maxWaitMs: null }));

    // The store down: a policy failing closed answers 503, one failing open 200 without remaining.
    s.down = true;
    await expectStatus(503, ...post('/v1/permits', { policy: 'api', key: 'k2' }));
    const open = await (await expectStatus(200, ...post('/v1/permits', { policy: 'failsOpen', key: 'k' }))).json();
    expect(open).toMatchObject({ allowed: true, reason: 'store_error' });
    expect(open.remaining).toBeUndefined();
    await expectStatus(503, ...post('/v1/adjustments', { policy: 'api', key: 'k', cost: 1 }));
    await expectStatus(503, '/v1/buckets/api/k', { method: 'DELETE', headers: auth });
    await expectStatus(503, '/v1/buckets/api/k', { headers: auth });
    await expectStatus(503, '/v1/limits/api/k', { headers: auth });
    await expectStatus(503, ...put('/v1/limits/api/k', { capacity: 5, refillPerSecond: 1 }));
    await expectStatus(503, '/v1/limits/api/k', { method: 'DELETE', headers: auth });
    await expectStatus(503, '/v1/limits/api', { headers: auth });
    await expectStatus(503, ...put('/v1/limits/api', { capacity: 5, refillPerSecond: 1 }));
    await expectStatus(503, '/v1/limits/api', { method: 'DELETE', headers: auth });
    await expectStatus(503, ...put('/v1/blocks/api/k', { forMs: 1000 }));
    await expectStatus(503, '/v1/blocks/api/k', { method: 'DELETE', headers: auth });
    // A store that keeps no runtime limits: 501 on every change and read of them; a memory store with
    // no room for another key's record: 507 where a change would add one (review 5, L4).
    const { override: _none, ...plain } = memoryStore();
    const bare = checked(app(plain), rec);
    const sendBare = async (path: string, init: RequestInit) => expect((await bare.request(path, init)).status, `${init.method ?? 'GET'} ${path}`).toBe(501);
    await sendBare('/v1/limits/api/k', { headers: auth });
    await sendBare(...put('/v1/limits/api/k', { capacity: 5, refillPerSecond: 1 }));
    await sendBare('/v1/limits/api/k', { method: 'DELETE', headers: auth });
    await sendBare('/v1/limits/api', { headers: auth });
    await sendBare(...put('/v1/limits/api', { capacity: 5, refillPerSecond: 1 }));
    await sendBare('/v1/limits/api', { method: 'DELETE', headers: auth });
    await sendBare(...put('/v1/blocks/api/k', { forMs: 1000 }));
    await sendBare('/v1/blocks/api/k', { method: 'DELETE', headers: auth });
    const full = checked(app(memoryStore({ maxOverrides: 1 })), rec);
    expect((await full.request(...put('/v1/blocks/api/a', { forMs: 60_000 }))).status).toBe(200);
    expect((await full.request(...put('/v1/blocks/api/b', { forMs: 60_000 }))).status).toBe(507);
    expect((await full.request(...put('/v1/limits/api/b', { capacity: 5, refillPerSecond: 1 }))).status).toBe(507);
    // /healthz remembers its ping for a second: a fresh app asks the store again.
    const fresh = checked(app(s), rec);
    expect((await fresh.request('/healthz')).status).toBe(503);

    const missingResponses = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([m]) => m !== 'parameters')
        .flatMap(([m, op]) => Object.keys(op.responses).filter((st) => st !== 'default').map((st) => `${m.toUpperCase()} ${path} ${st}`)),
    ).filter((r) => !rec.responses.has(r));
    expect(missingResponses, 'documented responses no request produced').toEqual([]);

    const unseen: string[] = [];
    const walk = (name: string, schema: { properties?: Record<string, { properties?: object }> }) => {
      for (const [field, sub] of Object.entries(schema.properties ?? {})) {
        if (!rec.fields.get(name)?.has(field)) unseen.push(`${name}.${field}`);
        if (sub.properties) walk(`${name}.${field}`, sub as typeof schema);
      }
    };
    for (const [name, schema] of Object.entries(doc.components.schemas)) {
      if (['PermitRequest', 'AdjustmentRequest', 'Key', 'LimitsRequest', 'BlockRequest'].includes(name)) continue;
      walk(name, schema);
    }
    expect(unseen, 'documented response fields no response carried').toEqual([]);
  });

  it('fails a response with a field the document lacks, or a status it does not list', async () => {
    const rec = recorder();
    const headers = { 'RateLimit-Policy': '"api";q=1;w=1', 'X-RateLimit-Limit': '1' };
    const extra = Response.json({ allowed: true, policy: 'api', key: 'k', limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1, waitMs: 0, surprise: 1 }, { headers });
    await rec.check('POST', '/v1/permits', Response.json({ allowed: true, policy: 'api', key: 'k', limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1, waitMs: 0 }, { headers }));
    await expect(rec.check('POST', '/v1/permits', extra)).rejects.toThrow(/surprise|additional/);
    await expect(rec.check('POST', '/v1/permits', new Response(null, { status: 202 }))).rejects.toThrow(/not documented/);
    const noRetryAfter = Response.json({ allowed: false, policy: 'api', key: 'k', limit: 1, remaining: 0, retryAfterMs: 5, resetAfterMs: 1, waitMs: 0 }, { status: 429, headers });
    await expect(rec.check('POST', '/v1/permits', noRetryAfter)).rejects.toThrow(/Retry-After/);
    const problem = (status: number, type: string) => new Response(JSON.stringify({ type: `urn:edge-limiter:problem:${type}`, title: 't', status, detail: 'd' }), { status, headers: { 'Content-Type': 'application/problem+json' } });
    // A type this status does not carry on this route; a 5xx whose type is not a listed one; a body whose status disagrees.
    await expect(rec.check('POST', '/v1/permits', problem(400, 'unauthorized'))).rejects.toThrow(/type/);
    await expect(rec.check('POST', '/v1/permits', problem(599, 'invalid-json'))).rejects.toThrow(/type/);
    await expect(rec.check('POST', '/v1/permits', new Response(JSON.stringify({ type: 'urn:edge-limiter:problem:invalid-json', title: 't', status: 401, detail: 'd' }), { status: 400, headers: { 'Content-Type': 'application/problem+json' } }))).rejects.toThrow(/status 401/);
  });
});
