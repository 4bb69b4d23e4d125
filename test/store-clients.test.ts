// Each store client bounds a call the limiter has given up on: node-redis gets the abort signal per
// command; the entries' Upstash client aborts its HTTP request; ioredis fails the command on a paused Redis.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import { startRedis } from '../scripts/lib/redis-server.js';
import { createNodeStore } from '../functions/app/store-node.js';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';

const policies = { p: { capacity: 5, refillPerSecond: 1, timeoutMs: 150 } };

describe('store clients stop work the limiter gave up on', () => {
  it('node-redis: each command carries the call\'s abort signal, aborted at the timeout', async () => {
    const seen: { key: string | undefined; signal: AbortSignal | undefined }[] = [];
    const client = {
      sendCommand: (args: string[], options?: { abortSignal?: AbortSignal }) => {
        // EVALSHA sha numkeys key ...
        seen.push({ key: args[3], signal: options?.abortSignal });
        return new Promise(() => {});
      },
    };
    const limiter = createLimiter({ store: redisStore({ client }), circuitBreaker: false, policies });
    expect(await limiter.take('p', 'k')).toMatchObject({ allowed: false, reason: 'store_error' });
    // The first decision's two commands: the policy-wide reading (Store.override on the policy's reserved
    // key `{prefix}p*`, awaited before a node's first decision) and then the decision's own step. Each is
    // a command the limiter gave up on: each must carry its own signal, aborted at its timeout.
    expect(seen.map((c) => c.key)).toEqual([expect.stringMatching(/p\*$/), expect.stringMatching(/:k$/)]);
    for (const { signal } of seen) {
      expect(signal).toBeInstanceOf(AbortSignal);
      expect(signal!.aborted).toBe(true);
      expect(String(signal!.reason)).toMatch(/timed out after 150 ms/);
    }
    expect(seen[0]!.signal).not.toBe(seen[1]!.signal);
  });

  describe('the entries\' Upstash client', () => {
    let server: Server;
    const closedAfterMs: number[] = [];
    afterAll(() => new Promise<void>((r) => server.close(() => r())));

    it('aborts a hung REST request at the policy timeout, so it does not hold a socket', async () => {
      server = createServer((req: IncomingMessage) => {
        const t0 = performance.now();
        req.resume();
        // Never answers; records when the client gives up on the request.
        req.socket.once('close', () => closedAfterMs.push(performance.now() - t0));
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
      const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      const { store } = await createNodeStore({ kind: 'upstash', url, token: 't', clientClock: false }, { timeoutMs: 150 });
      const limiter = createLimiter({ store, circuitBreaker: false, policies });
      const results = await Promise.all(Array.from({ length: 5 }, (_, i) => limiter.take('p', `k${i}`)));
      expect(results.every((d) => d.reason === 'store_error')).toBe(true);
      expect(limiter.stats().pendingStoreCalls).toBe(0);
      const until = performance.now() + 2000;
      while (closedAfterMs.length === 0 && performance.now() < until) await new Promise((r) => setTimeout(r, 20));
      // Auto-pipelining may put the five commands in one request: at least one request, each closed near 150 ms.
      expect(closedAfterMs.length).toBeGreaterThanOrEqual(1);
      for (const ms of closedAfterMs) expect(ms).toBeLessThan(150 + 500);
    });
  });

  it('ioredis (the entries\' client): commands to a paused Redis fail at commandTimeout instead of waiting for it', async () => {
    const redis = await startRedis();
    const { store, close } = await createNodeStore({ kind: 'redis', url: redis.url, clientClock: false }, { timeoutMs: 150 });
    try {
      await store.step('el:p:warm', { limits: [{ costUnits: 1, limitUnits: 10, refillUnitsPerUs: 1 }] });
      redis.process.kill('SIGSTOP');
      const t0 = performance.now();
      await expect(store.step('el:p:k', { limits: [{ costUnits: 1, limitUnits: 10, refillUnitsPerUs: 1 }] })).rejects.toThrow(/timed out|timeout/i);
      expect(performance.now() - t0).toBeLessThan(150 + 300);
    } finally {
      redis.process.kill('SIGCONT');
      await close();
      await redis.stop();
    }
  });
});
