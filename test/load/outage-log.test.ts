// `npm start` with a Redis that is not there: one log line when decisions start failing (not one per
// request), one when Redis is up and deciding again.
import { describe, expect, it } from 'vitest';
import { freePort, startRedis } from '../../scripts/lib/redis-server.js';
import { startNodeServer } from '../support/node-server.js';

describe('npm start logs one line per store outage', () => {
  it('says once that the store is unavailable, then once that it recovered', async () => {
    const port = await freePort();
    const server = await startNodeServer({
      REDIS_URL: `redis://127.0.0.1:${port}`,
      LIMITER_POLICIES: JSON.stringify({ p: { capacity: 100, refillPerSecond: 10, timeoutMs: 100, onStoreError: 'allow' } }),
      PERMIT_TOKENS: 't',
    });
    const post = () =>
      fetch(`${server.url}/v1/permits`, { method: 'POST', headers: { Authorization: 'Bearer t', 'Content-Type': 'application/json' }, body: '{"policy":"p","key":"k"}' }).then(
        (r) => r.json() as Promise<{ reason?: string }>,
      );
    const lines = (msg: RegExp) => server.output().split('\n').filter((l) => msg.test(l));
    let redis: Awaited<ReturnType<typeof startRedis>> | undefined;
    try {
      for (let i = 0; i < 40; i++) expect((await post()).reason).toBe('store_error');
      expect(lines(/store unavailable/)).toHaveLength(1);
      expect(JSON.parse(lines(/store unavailable/)[0]!)).toMatchObject({ store: 'redis' });
      redis = await startRedis({ port });
      const until = Date.now() + 10_000;
      let decided = 0;
      while (decided < 5 && Date.now() < until) {
        if ((await post()).reason === undefined) decided++;
        else await new Promise((r) => setTimeout(r, 50));
      }
      expect(decided).toBe(5);
      expect(lines(/store recovered/)).toHaveLength(1);
      expect(JSON.parse(lines(/store recovered/)[0]!).downMs).toBeGreaterThan(0);
      expect(lines(/store unavailable/)).toHaveLength(1);
    } finally {
      expect(await server.stop()).toBe(0);
      await redis?.stop();
    }
  });
});
