// Exactly once across a lost answer: a TCP proxy in front of the real Node server (`npm start`) cuts the
// connection as the server's answer to an applied take (or adjustment) arrives; PermitClient retries
// with the same Idempotency-Key and gets the first answer, and the store was charged once.
import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PermitClient } from '../../src/client/permit-client.js';
import { startRedis, type RedisProcess } from '../../scripts/lib/redis-server.js';
import { startNodeServer, type NodeServer } from '../support/node-server.js';

const TOKEN = 'retry-token-5b1c';
const POLICIES = JSON.stringify({
  api: { capacity: 10, refillPerSecond: 1 / 3600 },
  llm: { limits: { requests: { capacity: 10, refillPerSecond: 1 / 3600 }, tokens: { capacity: 1000, refillPerSecond: 1 / 3600 } } },
});

/** A proxy to `port` that, while `drop` is above 0, cuts both connections when an answer arrives. */
async function cuttingProxy(port: number): Promise<{ url: string; dropNext(n: number): void; dropped(): number; close(): Promise<void> }> {
  let drop = 0;
  let dropped = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(port, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
    }
    client.pipe(upstream);
    upstream.on('data', (chunk) => {
      if (drop > 0) {
        // The server has applied the request and answered: the client never hears it.
        drop--;
        dropped++;
        upstream.destroy();
        client.destroy();
        return;
      }
      client.write(chunk);
    });
    upstream.on('end', () => client.end());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port: own } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${own}`,
    dropNext: (n) => void (drop = n),
    dropped: () => dropped,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

for (const store of ['memory', 'redis'] as const) {
  describe(`a lost answer, retried with its Idempotency-Key (${store} store)`, () => {
    let redis: RedisProcess | undefined;
    let server: NodeServer;
    let proxy: Awaited<ReturnType<typeof cuttingProxy>>;
    beforeAll(async () => {
      redis = store === 'redis' ? await startRedis() : undefined;
      server = await startNodeServer({ ...(redis ? { REDIS_URL: redis.url } : { LIMITER_STORE: 'memory' }), LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: TOKEN });
      proxy = await cuttingProxy(server.port);
    }, 60_000);
    afterAll(async () => {
      await proxy?.close();
      if (server) expect(await server.stop()).toBe(0);
      await redis?.stop();
    });

    it('a take whose answer is cut off is retried and charged once', async () => {
      const client = new PermitClient({ url: proxy.url, token: TOKEN, retries: 3 });
      const direct = new PermitClient({ url: server.url, token: TOKEN });
      proxy.dropNext(2);
      const d = await client.take('api', 'k1', { cost: 4 });
      expect(proxy.dropped()).toBe(2);
      expect(d).toMatchObject({ allowed: true, remaining: 6, repeated: true });
      expect((await direct.peek('api', 'k1')).remaining).toBe(6);
      // Without an idempotency key, the same loss is not retried: the caller hears it.
      const bare = new PermitClient({ url: proxy.url, token: TOKEN, retries: 3, idempotency: false });
      proxy.dropNext(1);
      await expect(bare.take('api', 'k1')).rejects.toMatchObject({ code: 'permit_network_error' });
      // That take was applied all the same (the server answered; the answer was lost).
      expect((await direct.peek('api', 'k1')).remaining).toBe(5);
    });

    it('an adjustment of several limits whose answer is cut off is retried and applied once', async () => {
      const client = new PermitClient({ url: proxy.url, token: TOKEN, retries: 2 });
      const direct = new PermitClient({ url: server.url, token: TOKEN });
      await direct.take('llm', 'org', { cost: { requests: 1, tokens: 900 } });
      proxy.dropNext(1);
      const d = await client.adjust('llm', 'org', { tokens: -600 });
      expect(d.repeated).toBe(true);
      expect((await direct.peek('llm', 'org')).limits?.map((l) => l.remaining)).toEqual([9, 700]);
    });
  });
}
