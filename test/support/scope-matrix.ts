// Every route of the permit API × every right × in and out of the token's policies, as one list of cells
// that each entry's test runs through its own transport (Node server, workerd, Lambda events). A cell is
// allowed or 403; each is checked on the bucket it aims at, which holds 4 of 5 tokens before it: a 403
// leaves it at 4 (nothing taken, refunded or reset), an allowed request leaves what its route does.
import { createHash } from 'node:crypto';
import type { Right, Route } from '../../src/http/auth.js';

export const POLICIES = { api: { capacity: 5, refillPerSecond: 0.001 }, other: { capacity: 5, refillPerSecond: 0.001 } };

const ALL: Right[] = ['permit', 'settle', 'admin', 'stats'];
export const ALL_SECRET = 'k7Q-all-rights-0001';

/** One token of each right on `api` only (plain secrets), and one of every right on every policy given as its SHA-256. */
export const TOKENS = [
  ...(['permit', 'settle', 'admin', 'stats'] as const).map((r) => ({ name: `${r}-api`, secret: `k7Q-${r}-api-0001`, policies: ['api'], rights: [r] })),
  { name: 'all', secret: `sha256:${createHash('sha256').update(ALL_SECRET).digest('hex')}`, policies: '*', rights: ALL },
];

/** The variables an entry runs the matrix with. */
export const MATRIX_ENV = { LIMITER_STORE: 'memory', LIMITER_POLICIES: JSON.stringify(POLICIES), PERMIT_TOKENS: JSON.stringify(TOKENS) };

/** Every secret as presented, for the log checks (none shares a prefix with a token's name). */
export const SECRETS = [...TOKENS.slice(0, 4).map((t) => t.secret), ALL_SECRET, TOKENS[4]!.secret.slice('sha256:'.length)];

/** What the presented secret is for each token (the hashed one's plain text). */
const presented = (t: (typeof TOKENS)[number]) => (t.name === 'all' ? ALL_SECRET : t.secret);

export interface MatrixRequest {
  method: string;
  path: string;
  /** The whole Authorization value, or none. */
  authorization?: string;
  body?: unknown;
  /** Sent as the Idempotency-Key header. */
  idempotencyKey?: string;
}
export type Send = (req: MatrixRequest) => Promise<{ status: number; body: any }>;

interface RouteCell {
  route: string;
  /** The line of auth.ts's ROUTE_RIGHTS it exercises. */
  table: Route;
  right: Right;
  request(policy: string, key: string): MatrixRequest;
  /** Statuses an allowed request may answer. */
  ok: number[];
  /** Whole tokens the bucket holds after an allowed request (it holds 4 before). */
  after: number;
}

const bucket = (policy: string, key: string) => `/v1/buckets/${policy}/${encodeURIComponent(key)}`;
const limits = (policy: string, key: string) => `/v1/limits/${policy}/${encodeURIComponent(key)}`;

export const ROUTES: RouteCell[] = [
  { route: 'take', table: 'POST /v1/permits', right: 'permit', request: (policy, key) => ({ method: 'POST', path: '/v1/permits', body: { policy, key } }), ok: [200], after: 3 },
  { route: 'reserve', table: 'POST /v1/permits', right: 'permit', request: (policy, key) => ({ method: 'POST', path: '/v1/permits', body: { policy, key, cost: 2, maxWaitMs: 1000 } }), ok: [200], after: 2 },
  { route: 'peek', table: 'GET /v1/buckets/{policy}/{key}', right: 'permit', request: (policy, key) => ({ method: 'GET', path: bucket(policy, key) }), ok: [200], after: 4 },
  { route: 'reset', table: 'DELETE /v1/buckets/{policy}/{key}', right: 'admin', request: (policy, key) => ({ method: 'DELETE', path: bucket(policy, key) }), ok: [204], after: 5 },
  { route: 'free-form refund', table: 'POST /v1/adjustments', right: 'admin', request: (policy, key) => ({ method: 'POST', path: '/v1/adjustments', body: { policy, key, cost: -1 } }), ok: [200], after: 5 },
  // The settlement of the take that set the bucket up (its charge), at an actual cost of 0: all of it back.
  {
    route: 'settlement of its charge',
    table: 'POST /v1/adjustments with a charge',
    right: 'settle',
    request: (policy, key) => ({ method: 'POST', path: '/v1/adjustments', body: { policy, key, cost: 0, charge: `charge-${key}` } }),
    ok: [200],
    after: 5,
  },
  // Runtime limits and blocks (issue 31): admin. A key's own numbers of 10: 9 left of them.
  { route: 'set limits', table: 'PUT /v1/limits/{policy}/{key}', right: 'admin', request: (policy, key) => ({ method: 'PUT', path: limits(policy, key), body: { capacity: 10, refillPerSecond: 0.001 } }), ok: [200], after: 9 },
  { route: 'read limits', table: 'GET /v1/limits/{policy}/{key}', right: 'admin', request: (policy, key) => ({ method: 'GET', path: limits(policy, key) }), ok: [200], after: 4 },
  { route: 'clear limits', table: 'DELETE /v1/limits/{policy}/{key}', right: 'admin', request: (policy, key) => ({ method: 'DELETE', path: limits(policy, key) }), ok: [200], after: 4 },
  { route: 'block', table: 'PUT /v1/blocks/{policy}/{key}', right: 'admin', request: (policy, key) => ({ method: 'PUT', path: `/v1/blocks/${policy}/${encodeURIComponent(key)}`, body: { forMs: 60_000 } }), ok: [200], after: 0 },
  { route: 'unblock', table: 'DELETE /v1/blocks/{policy}/{key}', right: 'admin', request: (policy, key) => ({ method: 'DELETE', path: `/v1/blocks/${policy}/${encodeURIComponent(key)}` }), ok: [200], after: 4 },
  // A policy-wide change to the policy's own numbers: every other cell's bucket is as it was.
  { route: 'policy-wide limits', table: 'PUT /v1/limits/{policy}', right: 'admin', request: (policy) => ({ method: 'PUT', path: `/v1/limits/${policy}`, body: { capacity: 5, refillPerSecond: 0.001 } }), ok: [200], after: 4 },
  { route: 'read policy-wide limits', table: 'GET /v1/limits/{policy}', right: 'admin', request: (policy) => ({ method: 'GET', path: `/v1/limits/${policy}` }), ok: [200], after: 4 },
  { route: 'clear policy-wide limits', table: 'DELETE /v1/limits/{policy}', right: 'admin', request: (policy) => ({ method: 'DELETE', path: `/v1/limits/${policy}` }), ok: [200], after: 4 },
];

let keys = 0;

/**
 * Runs every cell through `send` and returns what went wrong, one line per cell (empty: all right), and
 * how many cells ran. `tag` keeps keys apart between runs on one server.
 */
export async function runMatrix(send: Send, tag: string): Promise<{ failures: string[]; cells: number }> {
  const failures: string[] = [];
  let cells = 0;
  const all = `Bearer ${ALL_SECRET}`;
  const remaining = async (policy: string, key: string) => (await send({ method: 'GET', path: bucket(policy, key), authorization: all })).body?.remaining;
  for (const token of TOKENS) {
    for (const route of ROUTES) {
      for (const policy of Object.keys(POLICIES)) {
        cells++;
        const key = `${tag}-${++keys}`;
        const cell = `${token.name} ${route.route} on ${policy}`;
        const charged = await send({ method: 'POST', path: '/v1/permits', authorization: all, body: { policy, key }, idempotencyKey: `charge-${key}` });
        if (charged.status !== 200 || (await remaining(policy, key)) !== 4) {
          failures.push(`${cell}: could not set the bucket up (${charged.status})`);
          continue;
        }
        const res = await send({ ...route.request(policy, key), authorization: `Bearer ${presented(token)}` });
        const hasRight = token.rights.includes(route.right);
        const inScope = token.policies === '*' || token.policies.includes(policy);
        const left = await remaining(policy, key);
        if (hasRight && inScope) {
          if (!route.ok.includes(res.status)) failures.push(`${cell}: allowed, but answered ${res.status} ${JSON.stringify(res.body)}`);
          else if (left !== route.after) failures.push(`${cell}: allowed, the bucket holds ${left}, not ${route.after}`);
          continue;
        }
        if (res.status !== 403 || res.body?.type !== 'urn:edge-limiter:problem:forbidden') {
          failures.push(`${cell}: should be 403 forbidden, got ${res.status} ${JSON.stringify(res.body)}`);
        } else if (!hasRight ? res.body.right !== route.right || !res.body.detail.includes(`\`${route.right}\``) : res.body.policy !== policy || !res.body.detail.includes(`"${policy}"`)) {
          failures.push(`${cell}: the 403 does not name the missing ${hasRight ? 'policy' : 'right'}: ${JSON.stringify(res.body)}`);
        } else if ('remaining' in res.body || 'limit' in res.body) failures.push(`${cell}: the 403 reads the bucket: ${JSON.stringify(res.body)}`);
        if (left !== 4) failures.push(`${cell}: refused, but the bucket holds ${left}, not 4`);
      }
    }
    // Stats name no policy in the request: a token may read them with the right, and sees only its policies.
    cells++;
    const stats = await send({ method: 'GET', path: '/v1/stats', authorization: `Bearer ${presented(token)}` });
    if (token.rights.includes('stats')) {
      const seen = Object.keys(stats.body?.policies ?? {}).sort();
      const expected = token.policies === '*' ? Object.keys(POLICIES).sort() : [...token.policies].sort();
      if (stats.status !== 200 || JSON.stringify(seen) !== JSON.stringify(expected)) failures.push(`${token.name} stats: expected 200 with ${expected}, got ${stats.status} with ${seen}`);
    } else if (stats.status !== 403 || stats.body?.right !== 'stats' || 'policies' in (stats.body ?? {})) {
      failures.push(`${token.name} stats: should be 403 naming stats, got ${stats.status} ${JSON.stringify(stats.body)}`);
    }
  }
  // No token, and a token nobody configured (one of the right length, the hashed one's digest itself): 401 on every route.
  for (const authorization of [undefined, `Bearer ${'x'.repeat(ALL_SECRET.length)}`, `Bearer ${TOKENS[4]!.secret}`]) {
    for (const route of [...ROUTES.map((r) => r.request('api', `${tag}-unauthorized`)), { method: 'GET', path: '/v1/stats' }]) {
      cells++;
      const res = await send({ ...route, ...(authorization ? { authorization } : {}) });
      if (res.status !== 401) failures.push(`${route.method} ${route.path} with ${authorization ? 'an unknown token' : 'no token'}: ${res.status}, not 401`);
    }
  }
  if (((await remaining('api', `${tag}-unauthorized`)) ?? 5) !== 5) failures.push('a 401 request changed a bucket');
  return { failures, cells };
}

/** A Send over fetch to a server's base URL. */
export const fetchSend =
  (base: string): Send =>
  async ({ method, path, authorization, body, idempotencyKey }) => {
    const res = await fetch(base + path, {
      method,
      headers: {
        ...(authorization ? { Authorization: authorization } : {}),
        ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
        ...(idempotencyKey ? { 'Idempotency-Key': idempotencyKey } : {}),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
