// The bearer-token check: fixed work per check whatever the presented token, and tokens never logged.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { checkTokens, tokenChecker } from '../../src/http/auth.js';
import { createLimiter, memoryStore } from '../../src/index.js';
import { permitApp } from '../../src/http/permit-app.js';
import { checked } from '../support/openapi-contract.js';

afterEach(() => vi.restoreAllMocks());

describe('tokenChecker', () => {
  it('accepts configured tokens only', async () => {
    const c = tokenChecker(checkTokens(['alpha-token', 'beta-token']));
    expect((await c.check('Bearer alpha-token'))?.name).toBe('token-1');
    expect((await c.check('Bearer beta-token'))?.name).toBe('token-2');
    for (const bad of [undefined, '', 'Bearer', 'Bearer ', 'Bearer alpha-tokenx', 'Bearer alpha', 'Basic alpha-token', 'alpha-token', 'Bearer alpha-token extra']) {
      expect(await c.check(bad), String(bad)).toBeUndefined();
    }
  });

  it('does the same work for a right token, a wrong one of the same length, and one of another length', async () => {
    const c = tokenChecker(checkTokens(['alpha-token', 'beta-token', 'gamma-token']));
    await c.check('Bearer warm-up');
    const digest = vi.spyOn(crypto.subtle, 'digest');
    const calls: { input: number; outputs: number }[] = [];
    for (const presented of ['alpha-token', 'alpha-tokem', 'a', 'x'.repeat(4096)]) {
      digest.mockClear();
      await c.check(`Bearer ${presented}`);
      // One SHA-256 of the presented token: every comparison is then 32 bytes against 32 bytes, for every
      // configured token, so neither content nor length shows in the time taken.
      calls.push({ input: digest.mock.calls.length, outputs: (await Promise.all(digest.mock.results.map((r) => r.value as Promise<ArrayBuffer>))).filter((b) => b.byteLength === 32).length });
    }
    expect(calls).toEqual(Array(4).fill({ input: 1, outputs: 1 }));
  });
});

describe('logs', () => {
  it('a whole run of the permit API logs no token', async () => {
    const lines: string[] = [];
    for (const level of ['log', 'info', 'warn', 'error', 'debug'] as const) vi.spyOn(console, level).mockImplementation((...a) => void lines.push(a.map(String).join(' ')));
    const secret = 'sk_live_do_not_log_me_42';
    const limiter = createLimiter({ store: memoryStore(), policies: { p: { capacity: 1, refillPerSecond: 1 } }, onDecision: (e) => console.log(JSON.stringify(e)) });
    const app = checked(permitApp({ limiter, tokens: [secret] }));
    const empty = checked(permitApp({ limiter, tokens: [] }));
    const send = (a: typeof app, auth: string, body = '{"policy":"p","key":"k"}') =>
      a.request('/v1/permits', { method: 'POST', headers: { Authorization: auth, 'Content-Type': 'application/json' }, body });
    await send(app, `Bearer ${secret}`);
    await send(app, `Bearer ${secret}`);
    await send(app, `Bearer ${secret}x`);
    await send(app, `Bearer ${secret}`, '{bad');
    await send(empty, `Bearer ${secret}`);
    await app.request(`/v1/buckets/p/k?token=${secret}`);
    expect(lines.length).toBeGreaterThan(2);
    expect(lines.join('\n')).not.toContain(secret);
  });
});
