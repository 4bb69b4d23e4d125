// Charges that apply exactly once: a take or an adjustment carrying an idempotency key (the
// Idempotency-Key header on the permit API) is recorded by the store in the same atomic step, and a
// repeat within the window answers the first decision and charges nothing.
import { describe, expect, it } from 'vitest';
import { createLimiter, IdempotencyConflictError, InvalidInputError, memoryStore, type Store } from '../../src/index.js';
import { permitApp } from '../../src/http/permit-app.js';
import { checked } from '../support/openapi-contract.js';

const TOKEN = 'tok-idem-0123456789';
const POLICIES = {
  api: { capacity: 3, refillPerSecond: 1 / 60 },
  llm: { limits: { requests: { capacity: 5, refillPerSecond: 1 / 60 }, tokens: { capacity: 1000, refillPerSecond: 1 / 60 } } },
  leased: { capacity: 100, refillPerSecond: 1 / 60, lease: { tokens: 10, maxAgeMs: 60_000 } },
};

function setup() {
  let nowMs = 1_790_000_000_000;
  const inner = memoryStore({ nowMs: () => nowMs });
  const store = { name: 'counted', calls: 0, step: (k: string, a: Parameters<Store['step']>[1]) => (store.calls++, inner.step(k, a)), reset: (k: string) => inner.reset(k), ping: async () => {} };
  const limiter = createLimiter({ store, policies: POLICIES, idempotencyWindowMs: 60_000, monotonicMs: () => nowMs });
  return { limiter, store, advance: (ms: number) => (nowMs += ms) };
}

describe('idempotency keys in the library', () => {
  it('a repeated take answers the first decision and charges nothing; after the window it applies again', async () => {
    const { limiter, advance } = setup();
    const first = await limiter.take('api', 'k', { cost: 2, idempotencyKey: 'op-1' });
    expect(first).toMatchObject({ allowed: true, remaining: 1 });
    expect(first.repeated).toBeUndefined();
    const again = await limiter.take('api', 'k', { cost: 2, idempotencyKey: 'op-1' });
    expect(again).toMatchObject({ allowed: true, remaining: 1, repeated: true });
    expect((await limiter.peek('api', 'k')).remaining).toBe(1);
    // A refusal is recorded too: its retry is refused the same way, even once tokens exist.
    const refused = await limiter.take('api', 'k', { cost: 2, idempotencyKey: 'op-2' });
    expect(refused.allowed).toBe(false);
    advance(59_000);
    expect(await limiter.take('api', 'k', { cost: 2, idempotencyKey: 'op-2' })).toMatchObject({ allowed: false, repeated: true });
    // Past the window (60 s), the key is forgotten and the take applies (the bucket has refilled 1 by then).
    advance(1_000);
    expect(await limiter.take('api', 'k', { cost: 2, idempotencyKey: 'op-1' })).toMatchObject({ allowed: true, remaining: 0 });
  });

  it('the same key for another request is an IdempotencyConflictError, and nothing is applied', async () => {
    const { limiter } = setup();
    await limiter.take('api', 'k', { cost: 1, idempotencyKey: 'op' });
    await expect(limiter.take('api', 'k', { cost: 2, idempotencyKey: 'op' })).rejects.toBeInstanceOf(IdempotencyConflictError);
    await expect(limiter.take('api', 'k', { cost: 1, maxWaitMs: 10, idempotencyKey: 'op' })).rejects.toMatchObject({ field: 'idempotencyKey' });
    await expect(limiter.adjust('api', 'k', 1, { idempotencyKey: 'op' })).rejects.toBeInstanceOf(IdempotencyConflictError);
    expect((await limiter.peek('api', 'k')).remaining).toBe(2);
    // Keys are per bucket: the same key on another key of the bucket's policy is another operation.
    expect(await limiter.take('api', 'other', { cost: 1, idempotencyKey: 'op' })).toMatchObject({ allowed: true, remaining: 2 });
  });

  it('an adjustment with a key settles once, on several limits', async () => {
    const { limiter } = setup();
    await limiter.take('llm', 'org', { cost: { requests: 1, tokens: 800 } });
    for (let i = 0; i < 3; i++) {
      const d = await limiter.adjust('llm', 'org', { tokens: -500 }, { idempotencyKey: 'settle-1' });
      expect(d.repeated).toBe(i > 0 ? true : undefined);
    }
    expect((await limiter.peek('llm', 'org')).limits?.map((l) => l.remaining)).toEqual([4, 700]);
  });

  it('a take with a key always goes to the store: a lease never answers it', async () => {
    const { limiter, store } = setup();
    await limiter.take('leased', 'hot');
    await limiter.take('leased', 'hot'); // a grant: later takes are answered from the lease...
    expect((await limiter.take('leased', 'hot')).reason).toBe('lease');
    const before = store.calls;
    const d = await limiter.take('leased', 'hot', { idempotencyKey: 'x' });
    expect(d.reason).toBeUndefined();
    expect(store.calls - before).toBe(1);
    await limiter.close();
  });

  it('refuses keys that are empty, too long or not well-formed, and a window out of range, before the store', async () => {
    const { limiter, store } = setup();
    for (const bad of ['', 'x'.repeat(257), '\ud800', 7 as unknown as string]) {
      await expect(limiter.take('api', 'k', { idempotencyKey: bad })).rejects.toBeInstanceOf(InvalidInputError);
    }
    expect(store.calls).toBe(0);
    expect(() => createLimiter({ store: memoryStore(), policies: POLICIES, idempotencyWindowMs: 500 })).toThrow(/idempotencyWindowMs must be an integer from 1000 to 86400000/);
  });
});

describe('Idempotency-Key on the permit API', () => {
  const app = () => {
    const s = setup();
    const a = checked(permitApp({ limiter: s.limiter, tokens: [TOKEN], log: () => {} }));
    const send = (path: string, body: unknown, key?: string) =>
      a.request(path, {
        method: 'POST',
        headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json', ...(key === undefined ? {} : { 'Idempotency-Key': key }) },
        body: JSON.stringify(body),
      });
    return { ...s, send };
  };

  it('a repeat of a POST /v1/permits with the same key answers the first decision, marked repeated', async () => {
    const { send, limiter } = app();
    const first = await send('/v1/permits', { policy: 'api', key: 'k', cost: 3 }, '"9d1f6c1e-5a6b-4f0e-8a51-2f1e7c1e0b11"');
    expect(first.status).toBe(200);
    const firstBody = (await first.json()) as Record<string, unknown>;
    // The same key, unquoted this time: the same operation.
    const again = await send('/v1/permits', { policy: 'api', key: 'k', cost: 3 }, '9d1f6c1e-5a6b-4f0e-8a51-2f1e7c1e0b11');
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ ...firstBody, repeated: true });
    expect((await limiter.peek('api', 'k')).remaining).toBe(0);
  });

  it('a key reused for another request is 422; a bad key is 400 naming the header; both charge nothing', async () => {
    const { send, store } = app();
    await send('/v1/adjustments', { policy: 'api', key: 'k', cost: 1 }, '"a"');
    const calls = store.calls;
    const reused = await send('/v1/permits', { policy: 'api', key: 'k', cost: 1 }, '"a"');
    expect(reused.status).toBe(422);
    expect(reused.headers.get('content-type')).toBe('application/problem+json');
    expect(await reused.json()).toMatchObject({ type: 'urn:edge-limiter:problem:idempotency-key-reused', field: 'Idempotency-Key' });
    for (const bad of ['""', `"${'x'.repeat(300)}"`]) {
      const res = await send('/v1/permits', { policy: 'api', key: 'k' }, bad);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request', field: 'Idempotency-Key' });
    }
    expect(store.calls - calls).toBe(1); // only the reused key's lookup reached the store, and it changed nothing
  });
});

describe('idempotency keys: found by a hostile review', () => {
  it('a key that holds NUL cannot reach another key\'s record, and ids are printable ASCII in the library, the client and the header alike', async () => {
    const { limiter } = setup();
    await limiter.take('api', 'a\u0000b', { idempotencyKey: 'c' });
    // Before, `a\0b` + `c` and `a` + `b\0c` named one record: a take on `a` came back `repeated`, uncharged.
    await expect(limiter.take('api', 'a', { idempotencyKey: 'b\u0000c' })).rejects.toBeInstanceOf(InvalidInputError);
    const other = await limiter.take('api', 'a', { idempotencyKey: 'bc' });
    expect(other.repeated).toBeUndefined();
    expect(other.remaining).toBe(2);
    for (const bad of ['é', 'x\ny', '\u0000', '😀']) await expect(limiter.take('api', 'k', { idempotencyKey: bad })).rejects.toMatchObject({ field: 'idempotencyKey' });
    const { PermitClient } = await import('../../src/client/permit-client.js');
    let sent = 0;
    const client = new PermitClient({ url: 'http://p.test', token: 't', fetch: (async () => (sent++, new Response('{}'))) as unknown as typeof fetch });
    await expect(client.take('api', 'k', { idempotencyKey: 'ключ' })).rejects.toBeInstanceOf(InvalidInputError);
    expect(sent).toBe(0);
  });

  it('no record key in Redis is a bucket key: a bucket key built to look like one is just a bucket', async () => {
    const { opKeyOf } = await import('../../src/stores/redis.js');
    const record = opKeyOf('el:p:{t}a', 'c');
    expect(record.startsWith('\u0000')).toBe(true);
    expect(record).not.toBe('el:p:{t}a\u0000op\u0000c');
    expect(() => createLimiter({ store: memoryStore(), policies: POLICIES, prefix: '\u0000op' })).toThrow(/prefix must be a string of at most 64 characters, without NUL/);
  });
});
