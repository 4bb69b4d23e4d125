// Hostile input: >10,000 generated requests against the permit endpoint and the middleware.
// For every request: no 5xx, no crash, a problem+json body on every 4xx, and no store call (so no
// bucket change) for any request that was refused before a decision.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createLimiter, memoryStore, type Store } from '../src/index.js';
import { permitApp } from '../src/http/permit-app.js';
import { checked } from './support/openapi-contract.js';
import { rateLimit } from '../src/http/middleware.js';
import { headerKey } from '../src/http/key.js';

const TOKEN = 'fuzz-token-0123456789';

function countingStore(): Store & { steps: number } {
  const inner = memoryStore();
  const s = {
    name: 'memory',
    steps: 0,
    step: (k: string, a: Parameters<Store['step']>[1]) => {
      s.steps++;
      return inner.step(k, a);
    },
    reset: (k: string) => inner.reset(k),
    ping: () => inner.ping(),
  };
  return s;
}

const hostileString = fc.oneof(
  fc.string(),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.constantFrom('$gt', 'a.b', '{}', '{"$ne":null}', 'a\u0000b', '\u202eevil', '🦄🚀', 'x'.repeat(600), 'é'.repeat(300), '', ' ', '__proto__', 'constructor'),
);
const hostileValue = fc.oneof(
  hostileString,
  fc.integer(),
  fc.double(),
  fc.constantFrom(0, -1, 1.5, 1e21, Number.MAX_SAFE_INTEGER, 2 ** 53 + 2, -0),
  fc.boolean(),
  fc.constant(null),
  fc.constant({ $gt: '' }),
  fc.array(fc.string(), { maxLength: 3 }),
  fc.jsonValue({ maxDepth: 2 }),
);
/** A mostly-valid permit body with one or more fields replaced by hostile values. */
const permitBody = fc.record(
  {
    policy: fc.oneof({ weight: 8, arbitrary: fc.constant('api') }, { weight: 1, arbitrary: fc.constant('nope') }, { weight: 1, arbitrary: hostileValue }),
    key: fc.oneof({ weight: 6, arbitrary: fc.constantFrom('victim', 'k1', 'k2') }, { weight: 2, arbitrary: hostileValue }),
    cost: fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 1, max: 5 }) }, { weight: 2, arbitrary: hostileValue }),
    maxWaitMs: fc.oneof({ weight: 6, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: -10, max: 400_000 }) }, { weight: 1, arbitrary: hostileValue }),
  },
  { requiredKeys: [] },
).chain((b) =>
  fc.oneof(
    { weight: 8, arbitrary: fc.constant(b as Record<string, unknown>) },
    { weight: 1, arbitrary: hostileValue.map((extra) => ({ ...b, extra })) },
  ),
);
/** Raw body texts: JSON of the above, broken JSON, NaN/Infinity/1e309 spelled out, huge bodies. */
const rawBody = fc.oneof(
  { weight: 10, arbitrary: permitBody.map((b) => JSON.stringify(b)) },
  { weight: 2, arbitrary: fc.jsonValue().map((v) => JSON.stringify(v)) },
  { weight: 2, arbitrary: fc.string() },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '{"policy":"api","key":"victim","cost":NaN}',
      '{"policy":"api","key":"victim","cost":Infinity}',
      '{"policy":"api","key":"victim","cost":1e309}',
      '{"policy":"api","key":"victim","cost":-1e309}',
      '{"policy":"api","key":"victim","maxWaitMs":1e309}',
      '{"policy":"api","key":"victim","cost":1,"cost":2}',
      '{"policy":"api","key":"victim"',
      '\ufeff{"policy":"api","key":"victim"}',
      'null',
      '[]',
      '"api"',
    ),
  },
  { weight: 1, arbitrary: fc.constant(`{"policy":"api","key":"victim","pad":"${'x'.repeat(1024 * 1024)}"}`) },
);
const contentType = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom<string | undefined>('application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON') },
  { weight: 2, arbitrary: fc.constantFrom<string | undefined>('text/plain', 'application/x-www-form-urlencoded', undefined, 'application/json, application/json') },
);
const authorization = fc.oneof(
  { weight: 8, arbitrary: fc.constant<string | undefined>(`Bearer ${TOKEN}`) },
  { weight: 2, arbitrary: fc.constantFrom<string | undefined>(undefined, 'Bearer wrong', `Bearer ${TOKEN}x`, `Basic ${TOKEN}`, 'Bearer ', TOKEN) },
);
const rarely = fc.integer({ min: 0, max: 9 }).map((n) => n === 0);

async function checkResponse(res: Response): Promise<void> {
  expect(res.status, 'never a 5xx').toBeLessThan(500);
  const text = await res.text();
  if (res.status >= 400 && res.status !== 429) {
    expect(res.headers.get('content-type')).toBe('application/problem+json');
    const p = JSON.parse(text) as Record<string, unknown>;
    expect(p.type).toMatch(/^urn:edge-limiter:problem:/);
    expect(p.status).toBe(res.status);
    expect(typeof p.title).toBe('string');
    expect(typeof p.detail).toBe('string');
  }
}

describe('fuzz', () => {
  it('permit endpoint: 9,000 hostile requests, no 5xx, problem+json on every 4xx, no bucket change on refusals', async () => {
    const store = countingStore();
    const limiter = createLimiter({ store, policies: { api: { capacity: 1_000_000, refillPerSecond: 1e-3 } } });
    const app = checked(permitApp({ limiter, tokens: [TOKEN], log: () => {} }));
    let victimConsumed = 0;
    let requests = 0;
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(rawBody, contentType, authorization, rarely, rarely, async (body, type, auth, dupHeaders, bigHeader) => {
        const headers = new Headers();
        if (type !== undefined) headers.set('content-type', type);
        if (auth !== undefined) headers.set('authorization', auth);
        if (dupHeaders) {
          headers.append('authorization', `Bearer ${TOKEN}`);
          headers.append('x-forwarded-for', '1.1.1.1');
          headers.append('x-forwarded-for', '2.2.2.2');
        }
        if (bigHeader) headers.set('x-pad', 'p'.repeat(16 * 1024));
        const stepsBefore = store.steps;
        const res = await app.request('/v1/permits', { method: 'POST', headers, body });
        requests++;
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        await checkResponse(res.clone());
        if (res.status === 200 || res.status === 429) {
          expect(store.steps).toBe(stepsBefore + 1);
          const d = (await res.json()) as { allowed: boolean; key: string; limit: number };
          // A leading BOM is accepted (RFC 8259 lets parsers ignore it).
          if (d.allowed && d.key === 'victim') victimConsumed += JSON.parse(body.replace(/^\ufeff/, '')).cost ?? 1;
        } else {
          expect(store.steps, `refused with ${res.status} but the store was called`).toBe(stepsBefore);
        }
      }),
      { numRuns: 9000 },
    );
    // The victim bucket holds exactly what the accepted requests took.
    expect((await limiter.peek('api', 'victim')).remaining).toBe(1_000_000 - victimConsumed);
    console.log(`[fuzz] permit endpoint: ${requests} requests, statuses ${JSON.stringify(Object.fromEntries(statuses))}`);
    expect(statuses.get(200)).toBeGreaterThan(100);
    for (const s of [400, 401, 404, 413, 415]) expect(statuses.get(s), `status ${s} exercised`).toBeGreaterThan(0);
  });

  it('middleware and bucket routes: 3,000 hostile requests, no 5xx', async () => {
    const store = countingStore();
    const limiter = createLimiter({ store, policies: { api: { capacity: 5, refillPerSecond: 1e-6 } } });
    const app = checked(permitApp({ limiter, tokens: [TOKEN], log: () => {} }));
    app.use(
      '/gated/*',
      rateLimit({
        limiter,
        policy: 'api',
        key: headerKey('x-api-key'),
        cost: (c) => Number(c.req.header('x-cost') ?? '1'),
      }),
    );
    app.all('/gated/*', (c) => c.text('ok'));
    let requests = 0;
    const headerValue = fc.oneof(fc.string({ maxLength: 600 }).map((s) => s.replace(/[\r\n\0]/g, '')), fc.constantFrom('', ' ', '1', '0', '-1', '1.5', 'NaN', '1e309', '5', '6'));
    await fc.assert(
      fc.asyncProperty(headerValue, headerValue, fc.oneof(fc.string(), fc.constantFrom('%', '%00', '%F0%9F%A6%84', 'a/b', '..', '%2e%2e', 'x'.repeat(700))), fc.constantFrom('GET', 'DELETE', 'POST', 'PUT'), async (apiKey, cost, pathKey, method) => {
        const headers = new Headers({ authorization: `Bearer ${TOKEN}` });
        try {
          headers.set('x-api-key', apiKey);
          headers.set('x-cost', cost);
        } catch {
          // Not a legal header value: the client could not send it either.
        }
        const stepsBefore = store.steps;
        const gated = await app.request('/gated/x', { method: method === 'DELETE' ? 'GET' : method, headers });
        requests++;
        await checkResponse(gated.clone());
        if (gated.status === 400) expect(store.steps).toBe(stepsBefore);
        let url: string;
        try {
          url = `/v1/buckets/api/${pathKey}`;
          new URL(url, 'http://x');
        } catch {
          return;
        }
        const bucket = await app.request(url, { method, headers });
        requests++;
        await checkResponse(bucket);
      }),
      { numRuns: 1500 },
    );
    console.log(`[fuzz] middleware and bucket routes: ${requests} requests`);
    expect(requests).toBeGreaterThanOrEqual(2900);
  });
});
