// The GET /v1/stats contract, driven the same way against every entry (the app in-process, the Node
// server, the Worker in workerd): 401 problem+json without a valid token, 405 for other methods, and
// after known traffic on a fresh server, exact counts and the refused keys ranked.
import { expect } from 'vitest';

export type Requester = (path: string, init?: RequestInit) => Promise<Response>;

/** The policies the contract expects: `api` is charged, `idle` never is. */
export const STATS_POLICIES = JSON.stringify({ api: { capacity: 2, refillPerSecond: 0.001 }, idle: { capacity: 5, refillPerSecond: 1 } });

export async function expectUnauthorized(res: Response): Promise<void> {
  expect(res.status).toBe(401);
  expect(res.headers.get('content-type')).toBe('application/problem+json');
  expect(res.headers.get('www-authenticate')).toBe('Bearer');
  expect(await res.json()).toMatchObject({ type: 'urn:edge-limiter:problem:unauthorized', status: 401 });
}

/**
 * On a server started with STATS_POLICIES, PERMIT_TOKENS=token and the default LIMITER_TOP_KEYS:
 * `heavy` is refused 3 times, `light` once, `fine` never; one peek. Returns the body it checked.
 */
export async function checkStatsContract(request: Requester, token: string): Promise<Record<string, unknown>> {
  await expectUnauthorized(await request('/v1/stats'));
  await expectUnauthorized(await request('/v1/stats', { headers: { Authorization: 'Bearer not-the-token' } }));
  const auth = { Authorization: `Bearer ${token}` };
  const wrongMethod = await request('/v1/stats', { method: 'POST', headers: auth });
  expect(wrongMethod.status).toBe(405);
  expect(wrongMethod.headers.get('allow')).toBe('GET');

  const started = Date.now();
  const post = async (key: string) => {
    const res = await request('/v1/permits', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify({ policy: 'api', key }) });
    await res.body?.cancel();
    return res.status;
  };
  const statuses: Record<string, number[]> = { heavy: [], light: [], fine: [] };
  for (let i = 0; i < 5; i++) statuses.heavy!.push(await post('heavy'));
  for (let i = 0; i < 3; i++) statuses.light!.push(await post('light'));
  statuses.fine!.push(await post('fine'));
  expect(statuses).toEqual({ heavy: [200, 200, 429, 429, 429], light: [200, 200, 429], fine: [200] });
  const peek = await request('/v1/buckets/api/heavy', { headers: auth });
  expect(peek.status).toBe(200);
  await peek.body?.cancel();
  const ended = Date.now();

  const res = await request('/v1/stats', { headers: auth });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('application/json');
  expect(res.headers.get('cache-control')).toBe('no-store');
  const body = (await res.json()) as Record<string, any>;
  expect(Object.keys(body).sort()).toEqual(['policies', 'since', 'topKeys']);
  expect(body.topKeys).toBe(100);
  expect(Date.parse(body.since)).toBeLessThanOrEqual(started);
  expect(Object.keys(body.policies).sort()).toEqual(['api', 'idle']);
  const zero = { allowed: 0, denied: 0, store_error: 0, deny_cache: 0, lease: 0, local: 0, blocked: 0 };
  expect(body.policies.idle).toEqual({ decisions: zero, peeks: 0, refused: 0, topRefused: [] });
  const api = body.policies.api;
  expect(api.decisions).toEqual({ ...zero, allowed: 5, denied: 4 });
  expect(api.peeks).toBe(1);
  expect(api.refused).toBe(4);
  expect(api.topRefused.map((e: { key: string; count: number; error: number }) => [e.key, e.count, e.error])).toEqual([
    ['heavy', 3, 0],
    ['light', 1, 0],
  ]);
  for (const e of api.topRefused) {
    const first = Date.parse(e.firstSeen);
    const last = Date.parse(e.lastSeen);
    // Workers freeze their clock during I/O-free stretches, so allow a second either side.
    expect(first).toBeGreaterThanOrEqual(started - 1000);
    expect(last).toBeGreaterThanOrEqual(first);
    expect(last).toBeLessThanOrEqual(ended + 1000);
  }
  return body;
}
