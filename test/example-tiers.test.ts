// examples/worker-tiers.ts (the seed's tiers: API keys on a free or a pro plan) run as written, its
// imports of the package pointed at src/, its Upstash client at the local Upstash REST server over the
// real Redis. Two copies of the module stand for two edge locations: a plan change made through one is
// obeyed by the other's next request, with no redeploy and no wait.
import type { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { startUpstashLocal, type UpstashLocal } from '../scripts/upstash-local/server.js';

vi.mock('edge-limiter', () => import('../src/index.js'));
vi.mock('edge-limiter/redis', () => import('../src/stores/redis.js'));
vi.mock('edge-limiter/hono', () => import('../src/hono.js'));

const EXAMPLE: string = '../examples/worker-tiers.ts';

let upstash: UpstashLocal;
beforeAll(async () => {
  upstash = await startUpstashLocal({ redisUrl: inject('redisUrl'), token: 'tiers-upstash-token' });
});
afterAll(async () => {
  await upstash?.close();
});

/** One edge location: a fresh copy of the example's module (its own limiter), and its env. */
async function location() {
  vi.resetModules();
  // A path TypeScript does not follow: the example is type-checked against the package (npm run check:package).
  const { default: app } = (await import(/* @vite-ignore */ EXAMPLE)) as { default: Hono };
  const env = { UPSTASH_REDIS_REST_URL: upstash.url, UPSTASH_REDIS_REST_TOKEN: 'tiers-upstash-token', ADMIN_TOKEN: 'tiers-admin-token' };
  return {
    hello: (apiKey: string) => app.request('/api/hello', { headers: { 'x-api-key': apiKey } }, env),
    plan: (customer: string, plan: 'free' | 'pro', token = 'tiers-admin-token') =>
      app.request(`/admin/customers/${customer}/plan`, { method: 'PUT', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ plan }) }, env),
  };
}

describe('examples/worker-tiers.ts', () => {
  it('free is 10 a minute; upgrading to pro is one call, obeyed at once by another location; downgrading too', async () => {
    const [paris, tokyo] = [await location(), await location()];
    const statuses = async (at: typeof paris, n: number) => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) out.push((await at.hello('key-alice')).status);
      return out;
    };
    expect(await statuses(paris, 11)).toEqual([...Array(10).fill(200), 429]);
    const refused = await tokyo.hello('key-alice');
    expect(refused.status).toBe(429);
    expect(refused.headers.get('ratelimit-policy')).toBe('"api";q=10;w=60');

    const upgraded = await paris.plan('alice', 'pro');
    expect(upgraded.status).toBe(200);
    expect(await upgraded.json()).toMatchObject({ source: 'key', limits: [{ capacity: 100 }] });
    const now = await tokyo.hello('key-alice');
    expect(now.status).toBe(200);
    expect(now.headers.get('ratelimit-policy')).toBe('"api";q=100;w=60');
    // Bob is still on free.
    expect((await tokyo.hello('key-bob')).headers.get('ratelimit-policy')).toBe('"api";q=10;w=60');

    const downgraded = await tokyo.plan('alice', 'free');
    expect(await downgraded.json()).toMatchObject({ source: 'policy', previous: { source: 'key' } });
    const back = await paris.hello('key-alice');
    expect(back.status).toBe(429);
    expect(back.headers.get('ratelimit-policy')).toBe('"api";q=10;w=60');
    expect((await paris.plan('alice', 'pro', 'wrong')).status).toBe(401);
  });
});
