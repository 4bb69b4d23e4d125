// PermitClient against scripted fetches: its timeout, 503 retries with Retry-After, network errors, aborts.
import { describe, expect, it } from 'vitest';
import { AcquireTimeoutError, ForbiddenError, PermitClient, PermitError } from '../../src/client/permit-client.js';
import { createLimiter, memoryStore } from '../../src/index.js';
import { permitApp } from '../../src/http/permit-app.js';
import { AcquireTimeoutError as RootAcquireTimeoutError } from '../../src/index.js';
import { InvalidInputError } from '../../src/errors.js';

const ok = (body: object = {}) =>
  new Response(JSON.stringify({ allowed: true, policy: 'p', key: 'k', limit: 1, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000, waitMs: 0, ...body }), {
    status: 200,
    headers: { 'Content-Type': 'application/json' },
  });
const unavailable = (retryAfter: string) =>
  new Response(JSON.stringify({ type: 'urn:edge-limiter:problem:store-unavailable', status: 503, detail: 'down', retryAfterMs: 1000 }), {
    status: 503,
    headers: { 'Content-Type': 'application/problem+json', 'Retry-After': retryAfter },
  });

/** A fetch that answers from a script, one entry per call; 'hang' waits for the abort signal. */
function scripted(script: (Response | 'hang' | Error)[]) {
  const calls: { at: number; idempotencyKey: string | undefined }[] = [];
  const f = (async (_url: string, init: RequestInit) => {
    calls.push({ at: performance.now(), idempotencyKey: (init.headers as Record<string, string> | undefined)?.['Idempotency-Key'] });
    const next = script.shift() ?? 'hang';
    if (next instanceof Error) throw next;
    if (next === 'hang') {
      return new Promise<Response>((_, reject) => init.signal!.addEventListener('abort', () => reject(init.signal!.reason), { once: true }));
    }
    return next;
  }) as unknown as typeof fetch;
  return { f, calls };
}

describe('PermitClient', () => {
  it('bounds each call by timeoutMs alone, even when asking the server to reserve a long wait', async () => {
    const { f, calls } = scripted(['hang', 'hang', 'hang']);
    const client = new PermitClient({ url: 'http://permits.test', token: 't', fetch: f, timeoutMs: 100 });
    const t0 = performance.now();
    const err = await client.take('p', 'k', { maxWaitMs: 60_000 }).catch((e: unknown) => e);
    // Three calls (the first and 2 retries, 100 and 200 ms apart), each cut at 100 ms.
    expect(calls).toHaveLength(3);
    expect(performance.now() - t0).toBeLessThan(3 * 100 + 300 + 400);
    expect(err).toBeInstanceOf(PermitError);
    expect(err).toMatchObject({ status: 0, code: 'permit_timeout' });
  });

  it('retries a 503 after its Retry-After, at most `retries` times, and never past maxRetryDelayMs', async () => {
    const { f, calls } = scripted([unavailable('0'), unavailable('0'), ok()]);
    const client = new PermitClient({ url: 'http://permits.test', token: 't', fetch: f });
    expect(await client.take('p', 'k')).toMatchObject({ allowed: true });
    expect(calls).toHaveLength(3);

    const slow = scripted([unavailable('1'), ok()]);
    const t0 = performance.now();
    expect(await new PermitClient({ url: 'http://p.test', token: 't', fetch: slow.f }).take('p', 'k')).toMatchObject({ allowed: true });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(990);

    const capped = scripted([unavailable('120'), ok()]);
    const t1 = performance.now();
    await new PermitClient({ url: 'http://p.test', token: 't', fetch: capped.f, maxRetryDelayMs: 50 }).take('p', 'k');
    expect(performance.now() - t1).toBeLessThan(50 + 300);

    const down = scripted([unavailable('0'), unavailable('0'), unavailable('0'), ok()]);
    const err = await new PermitClient({ url: 'http://p.test', token: 't', fetch: down.f }).take('p', 'k').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PermitError);
    expect(err).toMatchObject({ status: 503, code: 'permit_http_503', retryAfterHeader: '0' });
    expect(down.calls).toHaveLength(3);
  });

  it('retries a network error with the same Idempotency-Key (the server applies it once); without one, wraps it in PermitError and does not retry', async () => {
    const cause = new TypeError('fetch failed');
    const retried = scripted([cause, ok()]);
    expect(await new PermitClient({ url: 'http://p.test', token: 't', fetch: retried.f }).take('p', 'k')).toMatchObject({ allowed: true });
    expect(retried.calls).toHaveLength(2);
    expect(retried.calls[0]!.idempotencyKey).toMatch(/^"[0-9a-f-]{36}"$/);
    expect(retried.calls[1]!.idempotencyKey).toBe(retried.calls[0]!.idempotencyKey);
    // A caller's own key is sent as given (quoted), and each call without one gets a new key.
    const own = scripted([ok(), ok(), ok()]);
    const client = new PermitClient({ url: 'http://p.test', token: 't', fetch: own.f });
    await client.adjust('p', 'k', -1, { idempotencyKey: 'settle-"7"' });
    await client.take('p', 'k');
    await client.take('p', 'k');
    expect(own.calls[0]!.idempotencyKey).toBe('"settle-\\"7\\""');
    expect(own.calls[1]!.idempotencyKey).not.toBe(own.calls[2]!.idempotencyKey);

    const { f, calls } = scripted([cause, ok()]);
    const err = await new PermitClient({ url: 'http://p.test', token: 't', fetch: f, idempotency: false }).take('p', 'k').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PermitError);
    expect(err).toMatchObject({ status: 0, code: 'permit_network_error', cause });
    expect((err as Error).message).toMatch(/unreachable: fetch failed/);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.idempotencyKey).toBeUndefined();
  });

  it("rethrows the caller's own abort unchanged, also while waiting to retry", async () => {
    const controller = new AbortController();
    const { f } = scripted(['hang']);
    const pending = new PermitClient({ url: 'http://p.test', token: 't', fetch: f }).take('p', 'k', { signal: controller.signal });
    controller.abort(new Error('caller gave up'));
    await expect(pending).rejects.toThrow('caller gave up');
    const retrying = scripted([unavailable('3'), ok()]);
    const c2 = new AbortController();
    const p2 = new PermitClient({ url: 'http://p.test', token: 't', fetch: retrying.f }).take('p', 'k', { signal: c2.signal });
    setTimeout(() => c2.abort(new Error('stop')), 30);
    await expect(p2).rejects.toThrow('stop');
  });

  it('acquire rejects with the AcquireTimeoutError exported from edge-limiter/client (the same class as the root)', async () => {
    expect(AcquireTimeoutError).toBe(RootAcquireTimeoutError);
    const { f } = scripted([new Response(JSON.stringify({ allowed: false, policy: 'p', key: 'k', limit: 1, remaining: 0, retryAfterMs: 5000, resetAfterMs: 5000, waitMs: 0 }), { status: 429 })]);
    const err = await new PermitClient({ url: 'http://p.test', token: 't', fetch: f }).acquire('p', 'k', { timeoutMs: 100 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AcquireTimeoutError);
    expect(err).toMatchObject({ retryAfterMs: 5000 });
  });

  it('a 403 is a ForbiddenError naming the missing right or policy, with the server\'s detail, and is not retried', async () => {
    const limiter = createLimiter({ store: memoryStore(), policies: { api: { capacity: 5, refillPerSecond: 1 }, web: { capacity: 5, refillPerSecond: 1 } } });
    const app = permitApp({ limiter, tokens: [{ name: 'svc', secret: 'svc-secret-0001', policies: ['api'], rights: ['permit'] }], log: () => {} });
    let calls = 0;
    const f = (async (url: string, init: RequestInit) => (calls++, app.request(url, init))) as unknown as typeof fetch;
    const client = new PermitClient({ url: 'http://permits.test', token: 'svc-secret-0001', fetch: f });
    expect((await client.take('api', 'k')).allowed).toBe(true);
    const reset = await client.reset('api', 'k').catch((e: unknown) => e);
    expect(reset).toBeInstanceOf(ForbiddenError);
    expect(reset).toBeInstanceOf(PermitError);
    expect(reset).toMatchObject({ name: 'ForbiddenError', status: 403, code: 'permit_http_403', right: 'admin', policy: undefined });
    expect((reset as Error).message).toContain('lacks the `admin` right');
    calls = 0;
    const other = await client.take('web', 'k').catch((e: unknown) => e);
    expect(other).toMatchObject({ name: 'ForbiddenError', right: undefined, policy: 'web' });
    expect((other as Error).message).toContain('may not use the policy "web"');
    expect(calls).toBe(1);
    expect((await client.peek('api', 'k')).remaining).toBe(4);
  });
});

describe('PermitClient: runtime limits and blocks', () => {
  const TOKEN = 'client-limits-token';
  function setup() {
    const limiter = createLimiter({
      store: memoryStore(),
      policies: { free: { capacity: 2, refillPerSecond: 1 / 3600 }, multi: { limits: { second: { capacity: 5, refillPerSecond: 5 }, day: { capacity: 100, refill: '100/day' } } } },
    });
    const app = permitApp({ limiter, tokens: [TOKEN, { name: 'taker', secret: 'client-permit-only-1', policies: '*', rights: ['permit'] }], log: () => {} });
    const fetchApp = ((url: string, init: RequestInit) => app.request(url, init)) as unknown as typeof fetch;
    return { limiter, client: new PermitClient({ url: 'http://permits.test', token: TOKEN, fetch: fetchApp }), fetchApp };
  }

  it('sets, reads and clears a key\'s numbers; the next take is decided under them', async () => {
    const { client } = setup();
    const set = await client.setLimits('free', 'k/1', { capacity: 10, refill: '10/hour' }, { expiresInMs: 60_000 });
    expect(set).toMatchObject({ policy: 'free', key: 'k/1', source: 'key', expiresInMs: 60_000, limits: [{ capacity: 10 }], previous: { source: 'policy' } });
    expect(await client.take('free', 'k/1')).toMatchObject({ allowed: true, limit: 10, remaining: 9, limitsInForce: [{ capacity: 10 }] });
    expect(await client.getLimits('free', 'k/1')).toMatchObject({ source: 'key' });
    expect(await client.clearLimits('free', 'k/1')).toMatchObject({ source: 'policy', previous: { source: 'key' } });
    expect((await client.take('free', 'k/1')).limit).toBe(2);
  });

  it('blocks and unblocks; a blocked take resolves allowed: false with reason blocked', async () => {
    const { client } = setup();
    expect(await client.block('free', 'abuser', { forMs: 60_000 })).toMatchObject({ blockedForMs: 60_000 });
    expect(await client.take('free', 'abuser')).toMatchObject({ allowed: false, reason: 'blocked' });
    expect((await client.unblock('free', 'abuser')).blockedForMs).toBeUndefined();
    expect(await client.take('free', 'abuser')).toMatchObject({ allowed: true });
  });

  it('a policy-wide change, read and cleared', async () => {
    const { client } = setup();
    expect(await client.setPolicyLimits('multi', { limits: { day: { capacity: 10, refill: '10/day' } } })).toMatchObject({ policy: 'multi', source: 'policy-wide', limits: [{ capacity: 5 }, { capacity: 10 }] });
    expect(await client.getPolicyLimits('multi')).toMatchObject({ source: 'policy-wide' });
    expect((await client.take('multi', 'anyone')).limits?.map((l) => l.limit)).toEqual([5, 10]);
    expect(await client.clearPolicyLimits('multi')).toMatchObject({ source: 'policy', previous: { source: 'policy-wide' } });
  });

  it('a bad body is a PermitError 400 naming the field; a token without admin a ForbiddenError naming it', async () => {
    const { client, fetchApp } = setup();
    const err = await client.setLimits('free', 'k', { capacity: 0, refillPerSecond: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PermitError);
    expect((err as PermitError).status).toBe(400);
    expect((err as PermitError).problem?.field).toBe('capacity');
    const taker = new PermitClient({ url: 'http://permits.test', token: 'client-permit-only-1', fetch: fetchApp });
    const denied = await taker.block('free', 'k', { forMs: 1000 }).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(ForbiddenError);
    expect((denied as ForbiddenError).right).toBe('admin');
  });

  it('refuses a key or policy no URL path can name ("", ".", "..", undefined) before sending anything: it reached the policy-wide route (review 5, H1)', async () => {
    const { limiter, fetchApp } = setup();
    const sent: string[] = [];
    const counted = ((url: string, init: RequestInit) => (sent.push(`${init.method} ${url}`), fetchApp(url, init))) as unknown as typeof fetch;
    const client = new PermitClient({ url: 'http://permits.test', token: TOKEN, fetch: counted, retries: 0 });
    const more = { capacity: 1000, refill: '1000/second' } as const;
    const keyCalls: Record<string, (policy: string, key: string) => Promise<unknown>> = {
      setLimits: (p, k) => client.setLimits(p, k, more),
      getLimits: (p, k) => client.getLimits(p, k),
      clearLimits: (p, k) => client.clearLimits(p, k),
      block: (p, k) => client.block(p, k, { forMs: 60_000 }),
      unblock: (p, k) => client.unblock(p, k),
      peek: (p, k) => client.peek(p, k),
      reset: (p, k) => client.reset(p, k),
    };
    const refusal = async (call: () => Promise<unknown>, field: string, says: string) => {
      const err = await call().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidInputError);
      expect(err).toMatchObject({ field, message: expect.stringContaining(says) });
    };
    const dots = 'must not be "." or "..": no URL path can name them';
    for (const [name, call] of Object.entries(keyCalls)) {
      for (const [key, says] of [['', 'invalid key: must not be empty'], ['.', dots], ['..', dots], [undefined, 'must be a string, got undefined']] as const) {
        await refusal(() => call('free', key as string), 'key', says);
      }
      // `/v1/limits/./free` is `/v1/limits/free` to every URL parser.
      for (const policy of ['.', '..', '']) await refusal(() => call(policy, 'free'), 'policy', policy === '' ? 'must be a non-empty string' : dots);
      expect(sent, name).toEqual([]);
    }
    for (const policy of ['.', '..', '']) {
      const says = policy === '' ? 'must be a non-empty string' : dots;
      await refusal(() => client.setPolicyLimits(policy, more), 'policy', says);
      await refusal(() => client.getPolicyLimits(policy), 'policy', says);
      await refusal(() => client.clearPolicyLimits(policy), 'policy', says);
    }
    expect(sent).toEqual([]);
    expect(await limiter.getPolicyLimits('free')).toMatchObject({ source: 'policy', limits: [{ capacity: 2 }] });
    // A key with dots that is no dot segment, or that encodes to none ("%2e" is sent as %252e), is a key.
    expect(await client.setLimits('free', '...', more)).toMatchObject({ key: '...', source: 'key' });
    expect(await client.setLimits('free', '%2e', more)).toMatchObject({ key: '%2e', source: 'key' });
    expect(await client.getLimits('free', '.x')).toMatchObject({ key: '.x', source: 'policy' });
    expect(sent).toHaveLength(3);
  });

  it('a change that got no answer is retried (it sets, it does not add)', async () => {
    const answer = new Response(JSON.stringify({ policy: 'p', key: 'k', limits: [{ name: 'p', capacity: 5, refillPerSecond: 1 }], source: 'key' }), { status: 200, headers: { 'Content-Type': 'application/json' } });
    const { f, calls } = scripted([new TypeError('fetch failed'), answer]);
    const client = new PermitClient({ url: 'http://permits.test', token: 't', fetch: f });
    expect(await client.setLimits('p', 'k', { capacity: 5, refillPerSecond: 1 })).toMatchObject({ source: 'key' });
    expect(calls).toHaveLength(2);
  });
});
