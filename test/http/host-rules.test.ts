// The app every entry serves (functions/app/app.ts) refuses an empty Host, a Host that holds several
// (a platform joins repeated lines into one value) or anything but one host name or IP literal with an
// optional port, and a header value with a control character, with 400 invalid-request, before any route and before
// the limiter: the Worker and Lambda entries get the rule the Node server applies on the wire
// (test/http/node-wire.test.ts). A request with no Host at all passes: a Lambda event may carry none.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../functions/app/env.js';
import { buildApp } from '../../functions/app/app.js';
import { memoryStore } from '../../src/index.js';
import { startLoggingOrigin, type LoggingOrigin } from '../support/logging-origin.js';

const TOKEN = 't';
let origin: LoggingOrigin;
let app: ReturnType<typeof buildApp>['app'];

beforeAll(async () => {
  origin = await startLoggingOrigin();
  const config = loadConfig({
    LIMITER_POLICIES: JSON.stringify({ p: { capacity: 10, refillPerSecond: 0.001 }, gate: { capacity: 10, refillPerSecond: 0.001 } }),
    PERMIT_TOKENS: TOKEN,
    GATE_ORIGIN: origin.url,
    GATE_POLICY: 'gate',
    GATE_KEY: 'header:x-api-key',
  });
  ({ app } = buildApp(config, memoryStore(), { log: () => {} }));
});
afterAll(() => origin.close());

const auth = { Authorization: `Bearer ${TOKEN}` };
const permit = (key: string, headers: Record<string, string>) =>
  app.request('/v1/permits', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json', ...headers }, body: JSON.stringify({ policy: 'p', key }) });
const remaining = async (key: string) => ((await (await app.request(`/v1/buckets/p/${key}`, { headers: { ...auth, Host: 'gw' } })).json()) as { remaining: number }).remaining;

describe('Host rules in the app (every entry)', () => {
  it('an empty Host, or one holding several ("a, b", "a; b", "a,b"): 400 invalid-request on every route, nothing charged or forwarded', async () => {
    for (const host of ['', 'a.example, b.example', 'a.example, a.example', 'a.example; b.example', 'a.example,b.example', 'a.example b.example']) {
      const key = `k-${JSON.stringify(host)}`;
      for (const pending of [app.request('/healthz', { headers: { Host: host } }), permit(key, { Host: host }), app.request('/page', { headers: { Host: host, 'X-API-KEY': key } })]) {
        const res = await pending;
        expect(res.status, JSON.stringify(host)).toBe(400);
        expect(res.headers.get('content-type')).toBe('application/problem+json');
        expect(await res.json()).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request', status: 400 });
      }
      expect(await remaining(encodeURIComponent(key)), JSON.stringify(host)).toBe(10);
    }
    await origin.settled();
    expect(origin.requests).toEqual([]);
  });

  it('a Host that is not one host name or IP literal with an optional port ("x/admin?", "a@evil.example"), or a control character in a header value: 400 invalid-request before any route and the limiter', async () => {
    const bad: Record<string, string>[] = [
      ...['x/admin?', 'x/v1/permits?', 'a@evil.example', 'gw#frag', '[zz]', 'gw:', 'gw:8080:1', 'gw\\x'].map((Host) => ({ Host })),
      ...['a\x01b', 'a\x7fb', '\x1b[0m'].map((v) => ({ Host: 'gw', 'X-A': v })),
    ];
    for (const headers of bad) {
      const key = `k-${JSON.stringify(headers)}`;
      for (const pending of [app.request('/healthz', { headers }), permit(key, headers), app.request('/public/page', { headers: { ...headers, 'X-API-KEY': key } })]) {
        const res = await pending;
        expect(res.status, JSON.stringify(headers)).toBe(400);
        expect(res.headers.get('content-type')).toBe('application/problem+json');
        expect(await res.json()).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request', status: 400 });
      }
      expect(await remaining(encodeURIComponent(key)), JSON.stringify(headers)).toBe(10);
    }
    // HTAB is the one control character a value may hold.
    expect((await app.request('/healthz', { headers: { Host: 'gw', 'X-A': 'a\tb' } })).status).toBe(200);
    await origin.settled();
    expect(origin.requests).toEqual([]);
  });

  it('one ordinary Host, or none (a Lambda event may carry none), is served', async () => {
    expect((await app.request('/healthz', { headers: { Host: 'gw.example:8443' } })).status).toBe(200);
    expect((await app.request('/healthz')).status).toBe(200);
    expect((await permit('plain', { Host: '[::1]:8080' })).status).toBe(200);
    expect(await remaining('plain')).toBe(9);
    const res = await app.request('/page', { headers: { Host: 'gw', 'X-API-KEY': 'a' } });
    expect(await res.text()).toBe('GET /page 0');
    // Unknown paths off the gateway are still the permit API's problem+json 404 (the app is built around it).
    const { app: plain } = buildApp(loadConfig({ LIMITER_POLICIES: JSON.stringify({ p: { capacity: 1, refillPerSecond: 1 } }), PERMIT_TOKENS: TOKEN }), memoryStore(), { log: () => {} });
    const missing = await plain.request('/nope', { headers: { Host: 'gw' } });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ type: 'urn:edge-limiter:problem:not-found' });
  });
});
