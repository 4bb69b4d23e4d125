// Scoped tokens' configuration (issue 32, item 1): PERMIT_TOKENS in its plain and JSON forms, errors that
// name the token and field and never hold a secret, hashed and plain secrets, and the audit and refusal
// log lines of the permit API.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../functions/app/env.js';
import { checkTokens, RIGHTS, ROUTE_RIGHTS, tokenChecker, type PermitToken } from '../../src/http/auth.js';
import { guide, table } from '../support/guides.js';
import { permitApp } from '../../src/http/permit-app.js';
import type { AuditEvent } from '../../src/limiter.js';
import { buildApp } from '../../functions/app/app.js';
import { switchableStore } from '../support/switchable-store.js';
import { assertNoHashedTwins } from '../../functions/app/token-twins.js';
import { ConfigError, createLimiter, memoryStore } from '../../src/index.js';

const sha = (s: string) => `sha256:${createHash('sha256').update(s).digest('hex')}`;
const POLICIES = JSON.stringify({ api: { capacity: 5, refillPerSecond: 1 }, web: { capacity: 5, refillPerSecond: 1 } });
const SECRET = 'Zq9-very-secret-value';
const token = (extra: Record<string, unknown> = {}) => ({ name: 'svc-a', secret: SECRET, policies: ['api'], rights: ['permit'], ...extra }) as unknown as PermitToken;

/** The ConfigError loadConfig throws for these PERMIT_TOKENS. */
function configError(tokens: unknown): ConfigError {
  try {
    loadConfig({ LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: typeof tokens === 'string' ? tokens : JSON.stringify(tokens) });
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error(`no error for ${JSON.stringify(tokens)}`);
}

describe('PERMIT_TOKENS', () => {
  it('comma-separated: each token has every right on every policy, named by position', async () => {
    const config = loadConfig({ LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: ' alpha-token, beta-token ,,' });
    expect(config.tokens).toEqual(['alpha-token', 'beta-token']);
    const grant = await tokenChecker(checkTokens(config.tokens)).check('Bearer beta-token');
    expect(grant).toEqual({ name: 'token-2', policies: '*', rights: new Set(['permit', 'settle', 'admin', 'stats']) });
  });

  it('JSON: scoped tokens with plain or hashed secrets; a hashed one is presented as its plain text, never as its digest', async () => {
    const config = loadConfig({
      LIMITER_POLICIES: POLICIES,
      PERMIT_TOKENS: JSON.stringify([token(), { name: 'ops', secret: sha('ops-secret-value-1'), policies: '*', rights: ['admin', 'stats'] }]),
    });
    const checker = tokenChecker(checkTokens(config.tokens));
    expect(await checker.check(`Bearer ${SECRET}`)).toEqual({ name: 'svc-a', policies: new Set(['api']), rights: new Set(['permit']) });
    expect(await checker.check('Bearer ops-secret-value-1')).toEqual({ name: 'ops', policies: '*', rights: new Set(['admin', 'stats']) });
    expect(await checker.check(`Bearer ${sha('ops-secret-value-1')}`)).toBeUndefined();
    expect(await checker.check(`Bearer ${sha('ops-secret-value-1').slice(7)}`)).toBeUndefined();
  });

  it('an invalid token is a ConfigError naming the token and field, never holding the secret', () => {
    const cases: [unknown, string][] = [
      ['[{"name":"svc-a","secret":"' + SECRET + '"', 'PERMIT_TOKENS'],
      [{ name: 'x' }, 'PERMIT_TOKENS'],
      [[token(), token({ name: 'b', secret: 'another-secret-2', rights: ['permit', 'root'] })], 'PERMIT_TOKENS[1].rights[1]'],
      [[token({ rights: [] })], 'PERMIT_TOKENS[0].rights'],
      [[token({ rights: 'admin' })], 'PERMIT_TOKENS[0].rights'],
      [[token({ policies: ['api', 'apii'] })], 'PERMIT_TOKENS[0].policies[1]'],
      [[token({ policies: [] })], 'PERMIT_TOKENS[0].policies'],
      [[token({ policies: 'api' })], 'PERMIT_TOKENS[0].policies'],
      [[token({ name: 'has space' })], 'PERMIT_TOKENS[0].name'],
      [[token({ name: undefined })], 'PERMIT_TOKENS[0].name'],
      [[token(), token({ secret: 'another-secret-1' })], 'PERMIT_TOKENS[1].name'],
      [[token(), token({ name: 'svc-b' })], 'PERMIT_TOKENS[1].secret'],
      [[token({ secret: `sha256:${'A'.repeat(64)}` })], 'PERMIT_TOKENS[0].secret'],
      [[token({ secret: `sha256:${SECRET}` })], 'PERMIT_TOKENS[0].secret'],
      [[token({ secret: `${SECRET} x` })], 'PERMIT_TOKENS[0].secret'],
      [[token({ secret: 42 })], 'PERMIT_TOKENS[0].secret'],
      [[token({ token: SECRET })], 'PERMIT_TOKENS[0]'],
      // A secret put in the wrong place (a field's name, a right, a policy) is never echoed (F3).
      [[token({ [SECRET]: true })], 'PERMIT_TOKENS[0]'],
      [[token({ rights: ['permit', SECRET] })], 'PERMIT_TOKENS[0].rights[1]'],
      [[token({ policies: ['api', SECRET] })], 'PERMIT_TOKENS[0].policies[1]'],
      // A scoped token's plain secret has at least 16 characters (F2b); its name is never echoed either.
      [[token({ secret: 'Zq9-fifteen-chr' })], 'PERMIT_TOKENS[0].secret'],
      [[token({ name: 'Zq9-very-secret' }), token({ name: 'Zq9-very-secret', secret: 'another-secret-3' })], 'PERMIT_TOKENS[1].name'],
      [['just-a-string-in-json'], 'PERMIT_TOKENS[0]'],
      [[null], 'PERMIT_TOKENS[0]'],
      ['dup-token-value,dup-token-value', 'PERMIT_TOKENS[1].secret'],
    ];
    for (const [tokens, field] of cases) {
      const err = configError(tokens);
      expect(err.field, JSON.stringify(tokens)).toBe(field);
      expect(err.message).not.toContain(SECRET.slice(0, 6));
      expect(err.message).not.toContain('Zq9');
      expect(err.message).not.toContain('dup-to');
    }
  });

  it('a plain secret equal to another token\'s hashed one is refused at the first check', async () => {
    const checker = tokenChecker(checkTokens([token(), token({ name: 'svc-b', secret: sha(SECRET) })]));
    await expect(checker.check(`Bearer ${SECRET}`)).rejects.toThrow(ConfigError);
    // The app answers a bare 500 server-misconfigured (the caller may be anyone), its log names the token
    // as PERMIT_TOKENS[1] (never the secret), and nothing is charged.
    const lines: Record<string, unknown>[] = [];
    const store = memoryStore();
    const tokens = JSON.stringify([token(), token({ name: 'svc-b', secret: sha(SECRET) })]);
    const { app } = buildApp(loadConfig({ LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: tokens }), store, { log: (_level, line) => void lines.push(line) });
    const res = await app.request('/v1/permits', { method: 'POST', headers: { Authorization: 'Bearer anyone-at-all-000', 'Content-Type': 'application/json' }, body: '{"policy":"api","key":"k"}' });
    expect(res.status).toBe(500);
    const text = await res.text();
    expect(text).toContain('server-misconfigured');
    expect(text).not.toContain('tokens[');
    expect(text).not.toContain(SECRET.slice(0, 6));
    const logged = JSON.stringify(lines);
    expect(logged).toContain('PERMIT_TOKENS[1].secret');
    expect(logged).not.toContain(SECRET.slice(0, 6));
    expect((await createLimiter({ store, policies: { api: { capacity: 5, refillPerSecond: 0.001 } } }).peek('api', 'k')).remaining).toBe(5);
  });

  it('the Node and Lambda entries refuse a plain secret equal to another token\'s hashed one at start, naming PERMIT_TOKENS[i].secret', async () => {
    const tokens = [token(), token({ name: 'svc-b', secret: sha(SECRET) })];
    expect(() => assertNoHashedTwins(tokens)).toThrow(/PERMIT_TOKENS\[1\]\.secret/);
    expect(() => assertNoHashedTwins(['alpha-token', sha('alpha-token')])).toThrow(/PERMIT_TOKENS\[1\]\.secret/);
    expect(() => assertNoHashedTwins([token(), token({ name: 'svc-b', secret: sha('another-secret-9') })])).not.toThrow();
    for (const file of ['functions/node.ts', 'functions/app/lambda-handler.ts']) expect(readFileSync(file, 'utf8')).toMatch(/loadConfig\(process\.env\);\n\s*assertNoHashedTwins\(config\.tokens\);/);
  });

  it('a short plain secret is refused in the JSON form only; the comma form and npm run dev\'s tokens are accepted', () => {
    expect(configError([token({ secret: 'short-secret' })]).field).toBe('PERMIT_TOKENS[0].secret');
    expect(loadConfig({ LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: JSON.stringify([token({ secret: 'x'.repeat(16) })]) }).tokens).toHaveLength(1);
    expect(loadConfig({ LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: 'short,tok' }).tokens).toEqual(['short', 'tok']);
    const dev = readFileSync('scripts/dev.mjs', 'utf8');
    for (const [, secret] of dev.matchAll(/secret: '([^']+)'/g)) expect(secret!.length).toBeGreaterThanOrEqual(16);
  });

  it('permitApp refuses invalid tokens when it is made', () => {
    const limiter = createLimiter({ store: memoryStore(), policies: { api: { capacity: 1, refillPerSecond: 1 } } });
    expect(() => permitApp({ limiter, tokens: [token({ policies: ['web'] }) as unknown as PermitToken] })).toThrow(/tokens\[0\]\.policies\[0\]/);
  });
});

describe('the deployed app\'s audit and refusal lines', () => {
  it('an administrative action writes one audit line naming the token, policy, key, what it left and when; a failed one says so; a 403 a warning; no secret anywhere', async () => {
    const lines: Record<string, unknown>[] = [];
    const audits: AuditEvent[] = [];
    const tokens = JSON.stringify([token({ name: 'ops', rights: ['admin', 'permit'] }), token({ name: 'svc', secret: 'svc-secret-00001' })]);
    const store = switchableStore();
    const { app } = buildApp(loadConfig({ LIMITER_POLICIES: JSON.stringify({ api: { capacity: 5, refillPerSecond: 0.001 } }), PERMIT_TOKENS: tokens, LIMITER_CIRCUIT_BREAKER: 'off' }), store, {
      log: (_level, line) => void lines.push(line),
      onAudit: (e) => void audits.push(e),
    });
    const send = (method: string, path: string, secret: string, body?: unknown) =>
      app.request(path, { method, headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' }, ...(body ? { body: JSON.stringify(body) } : {}) });
    await send('POST', '/v1/permits', SECRET, { policy: 'api', key: 'k', cost: 3 });
    const before = Date.now();
    expect((await send('POST', '/v1/adjustments', SECRET, { policy: 'api', key: 'k', cost: -1 })).status).toBe(200);
    expect((await send('DELETE', '/v1/buckets/api/k', SECRET)).status).toBe(204);
    expect((await send('DELETE', '/v1/buckets/api/k', 'svc-secret-00001')).status).toBe(403);
    store.down = true;
    expect((await send('POST', '/v1/adjustments', SECRET, { policy: 'api', key: 'k', cost: -1 })).status).toBe(503);
    const audit = lines.filter((l) => l.msg === 'audit');
    expect(audit).toEqual([
      { msg: 'audit', action: 'adjust', token: 'ops', policy: 'api', key: 'k', at: expect.any(String), before: { remaining: 2 }, after: { cost: -1, remaining: 3 } },
      { msg: 'audit', action: 'reset', token: 'ops', policy: 'api', key: 'k', at: expect.any(String), before: { remaining: 3 }, after: { remaining: 5 } },
      { msg: 'audit', action: 'adjust', token: 'ops', policy: 'api', key: 'k', at: expect.any(String), error: expect.any(String) },
    ]);
    for (const l of audit) expect(Date.parse(l.at as string)).toBeGreaterThanOrEqual(before - 1000);
    expect(audits.map((a) => [a.action, a.actor, a.error === undefined])).toEqual([['adjust', 'ops', true], ['reset', 'ops', true], ['adjust', 'ops', false]]);
    expect(lines.filter((l) => l.msg === 'forbidden')).toEqual([{ msg: 'forbidden', token: 'svc', method: 'DELETE', path: '/v1/buckets/api/k' }]);
    const text = JSON.stringify(lines);
    expect(text).not.toContain(SECRET.slice(0, 6));
    expect(text).not.toContain('svc-se');
  });
});

describe('POST /v1/adjustments and the settle right', () => {
  it('only a charge named as a string is a settlement: a null or a number is free-form and needs admin, before the body is parsed further', async () => {
    const limiter = createLimiter({ store: memoryStore(), policies: { api: { capacity: 5, refillPerSecond: 0.001 } } });
    const app = permitApp({ limiter, tokens: [token({ name: 'settler', rights: ['settle', 'permit'] })], log: () => {} });
    const send = (body: unknown) => app.request('/v1/adjustments', { method: 'POST', headers: { Authorization: `Bearer ${SECRET}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    await app.request('/v1/permits', { method: 'POST', headers: { Authorization: `Bearer ${SECRET}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ policy: 'api', key: 'k', cost: 2 }) });
    for (const charge of [null, 5, { id: 'x' }, ['x'], true]) {
      const res = await send({ policy: 'api', key: 'k', cost: -2, charge });
      expect(res.status, JSON.stringify(charge)).toBe(403);
      expect(await res.json()).toMatchObject({ right: 'admin' });
    }
    expect((await send({ policy: 'api', key: 'k', cost: -2 })).status).toBe(403);
    expect((await limiter.peek('api', 'k')).remaining).toBe(3);
  });
});

describe('docs/security.md', () => {
  const text = guide('security.md');
  it('its rights table gives each route of auth.ts\'s table under the right it needs, and names every right', () => {
    const rows = table(text, '| right | what it allows | what a leaked token of it can do |');
    expect(rows.map((r) => r[0])).toEqual(RIGHTS.map((r) => `\`${r}\``));
    // Each row's routes, as written in backticks, are exactly the table's routes of its right.
    for (const [cell, routes] of rows) {
      const listed = [...routes!.matchAll(/`([A-Z]+ \/[^`]*)`/g)].map((m) => m[1]);
      expect(listed.sort(), cell).toEqual(Object.entries(ROUTE_RIGHTS).filter(([, r]) => `\`${r}\`` === cell).map(([route]) => route).sort());
    }
  });

  it('the README\'s Security section lists the same rights, in the same order', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    expect(readme).toMatch(/^## Security$/m);
    expect(table(readme, '| right | allows | a leaked token of it can |').map((r) => r[0])).toEqual(RIGHTS.map((r) => `\`${r}\``));
  });

  it('its PERMIT_TOKENS example is a valid configuration, and its hashes are of no guessable secret', () => {
    const block = /^```json\n([\s\S]*?)^```/m.exec(text)![1]!;
    const config = loadConfig({ LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: block });
    expect(config.tokens.map((t) => (t as PermitToken).name)).toEqual(['checkout', 'ops']);
    for (const guess of ['test', 'secret', 'password', 'ops', 'checkout', '']) expect(block).not.toContain(sha(guess).slice(7));
  });
});

