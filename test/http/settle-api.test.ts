// Settlements through the permit API (issue 32, item 2): a take sent with an Idempotency-Key answers it
// as its `charge`; POST /v1/adjustments naming that charge settles it by the actual cost, once, and never
// refunds more than it took. The refund loop of the issue (capacity 2, near-zero refill, take then
// refund, 100 times): a `settle` token admits 2 of 100 (its free-form refunds are 403, its settlements
// give back at most their charge), an `admin` token's free-form refunds admit 100 of 100.
import { describe, expect, it } from 'vitest';
import { createLimiter, IdempotencyConflictError, InvalidInputError, memoryStore, settle as settleWork, UnknownChargeError } from '../../src/index.js';
import { PermitClient } from '../../src/client/permit-client.js';
import { permitApp } from '../../src/http/permit-app.js';
import { checked } from '../support/openapi-contract.js';

const SETTLE = 'settle-secret-0123456789';
const ADMIN = 'admin-secret-0123456789';
const PERMIT = 'permit-secret-0123456789';

function app() {
  const limiter = createLimiter({ store: memoryStore(), policies: { api: { capacity: 2, refillPerSecond: 1 / 3600 } } });
  return checked(
    permitApp({
      limiter,
      log: () => {},
      tokens: [
        { name: 'worker', secret: SETTLE, policies: ['api'], rights: ['permit', 'settle'] },
        { name: 'ops', secret: ADMIN, policies: '*', rights: ['permit', 'admin'] },
        { name: 'client', secret: PERMIT, policies: '*', rights: ['permit'] },
      ],
    }),
  );
}

type App = ReturnType<typeof app>;
const post = async (a: App, token: string, path: string, body: unknown, headers: Record<string, string> = {}) => {
  const res = await a.request(path, { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};
const take = (a: App, token: string, key: string, charge?: string) => post(a, token, '/v1/permits', { policy: 'api', key }, charge === undefined ? {} : { 'Idempotency-Key': charge });
const settle = (a: App, token: string, key: string, charge: string, cost: unknown) => post(a, token, '/v1/adjustments', { policy: 'api', key, charge, cost });

describe('POST /v1/adjustments with a charge', () => {
  it('settles a take by its Idempotency-Key: at most its charge back, once; another cost is 409, an unknown charge 404, a negative cost 400', async () => {
    const a = app();
    const taken = await post(a, SETTLE, '/v1/permits', { policy: 'api', key: 'u', cost: 2 }, { 'Idempotency-Key': 'job-1' });
    expect(taken).toMatchObject({ status: 200, body: { allowed: true, remaining: 0, charge: 'job-1' } });
    // No key, no charge to name.
    expect((await take(a, SETTLE, 'other')).body.charge).toBeUndefined();
    expect(await settle(a, SETTLE, 'u', 'job-1', 1)).toMatchObject({ status: 200, body: { remaining: 1 } });
    expect(await settle(a, SETTLE, 'u', 'job-1', 1)).toMatchObject({ status: 200, body: { remaining: 1, repeated: true } });
    expect(await settle(a, SETTLE, 'u', 'job-1', 0)).toMatchObject({ status: 409, body: { type: 'urn:edge-limiter:problem:charge-settled', field: 'charge' } });
    expect(await settle(a, SETTLE, 'u', 'job-2', 0)).toMatchObject({ status: 404, body: { type: 'urn:edge-limiter:problem:unknown-charge', field: 'charge' } });
    expect(await settle(a, SETTLE, 'u', 'job-1', -1)).toMatchObject({ status: 400, body: { field: 'cost' } });
    expect(await settle(a, SETTLE, 'u', 'job-1', null)).toMatchObject({ status: 400, body: { field: 'cost' } });
    const bucket = await a.request('/v1/buckets/api/u', { headers: { Authorization: `Bearer ${SETTLE}` } });
    expect(((await bucket.json()) as { remaining: number }).remaining).toBe(1);
  });

  it('a settlement needs the settle right: a permit-only token gets 403 and nothing is refunded', async () => {
    const a = app();
    await post(a, PERMIT, '/v1/permits', { policy: 'api', key: 'p', cost: 2 }, { 'Idempotency-Key': 'mine' });
    expect(await settle(a, PERMIT, 'p', 'mine', 0)).toMatchObject({ status: 403, body: { right: 'settle' } });
    expect((await take(a, PERMIT, 'p')).status).toBe(429);
  });

  it('the refund loop: 2 of 100 for a settle token, whatever it tries; 100 of 100 only with admin free-form refunds', async () => {
    const a = app();
    let admitted = 0;
    for (let i = 0; i < 100; i++) {
      if ((await take(a, SETTLE, 'loop')).status === 200) admitted++;
      // Free-form refunds are the admin's, and settlements give back only a charge's own.
      expect((await post(a, SETTLE, '/v1/adjustments', { policy: 'api', key: 'loop', cost: -1 })).status).toBe(403);
      expect((await settle(a, SETTLE, 'loop', 'never-taken', 0)).status).toBe(404);
      expect((await settle(a, SETTLE, 'loop', 'never-taken', -1)).status).toBe(400);
    }
    expect(admitted).toBe(2);

    // Each take named, each settled at 0: a settlement gives back its own charge and no more, so the
    // settle token's 100 settlements of one charge return 1 token in all.
    let named = 0;
    for (let i = 0; i < 100; i++) {
      if ((await take(a, SETTLE, 'named', i === 0 ? 'first' : undefined)).status === 200) named++;
      await settle(a, SETTLE, 'named', 'first', 0);
    }
    expect(named).toBe(3);

    let freeForm = 0;
    for (let i = 0; i < 100; i++) {
      if ((await take(a, ADMIN, 'admin-loop')).status === 200) freeForm++;
      expect((await post(a, ADMIN, '/v1/adjustments', { policy: 'api', key: 'admin-loop', cost: -1 })).status).toBe(200);
    }
    expect(freeForm).toBe(100);
  });
});

describe('PermitClient.settle and settle() through the API', () => {
  it('settles a charge, maps 404 and 409 to UnknownChargeError and IdempotencyConflictError, and refuses a negative cost before sending', async () => {
    const a = app();
    let sent = 0;
    const client = new PermitClient({ url: 'http://permits.test', token: SETTLE, fetch: (async (url: string, init?: RequestInit) => (sent++, a.request(url, init))) as typeof fetch });
    const taken = await client.take('api', 'c', { cost: 2, idempotencyKey: 'job' });
    expect(taken.charge).toBe('job');
    expect((await client.settle('api', 'c', { charge: 'job', cost: 1 })).remaining).toBe(1);
    expect((await client.settle('api', 'c', { charge: 'job', cost: 1 })).repeated).toBe(true);
    await expect(client.settle('api', 'c', { charge: 'job', cost: 2 })).rejects.toBeInstanceOf(IdempotencyConflictError);
    await expect(client.settle('api', 'c', { charge: 'nope', cost: 0 })).rejects.toBeInstanceOf(UnknownChargeError);
    const before = sent;
    await expect(client.settle('api', 'c', { charge: 'job', cost: -1 })).rejects.toBeInstanceOf(InvalidInputError);
    await expect(client.settle('api', 'c', { charge: 'job', cost: { x: 0.5 } })).rejects.toBeInstanceOf(InvalidInputError);
    expect(sent).toBe(before);
    // settle() with a token that may take and settle, and nothing more: the estimate 2, the work cost 1.
    const answer = await settleWork(client, { policy: 'api', key: 'd', estimate: 2, actual: () => 1 }, async () => 'work');
    expect(answer).toBe('work');
    expect((await client.peek('api', 'd')).remaining).toBe(1);
  });
});
