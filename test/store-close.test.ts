// closeClient: a store given its client closes it when the limiter closes, so a plain Node script exits;
// without it the client is the caller's to close (and the script stays alive while it is open).
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { describe, expect, inject, it, vi } from 'vitest';
import { ConfigError, createLimiter } from '../src/index.js';
import { mongoStore, type MongoCollectionLike } from '../src/stores/mongodb.js';
import { redisStore } from '../src/stores/redis.js';

const CHILD = fileURLToPath(new URL('./support/close-child.ts', import.meta.url));

/** Runs the script; resolves with its exit code and output, or 'still running' after `waitMs`. */
function script(env: Record<string, string>, waitMs: number): Promise<{ exited: boolean; code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const started = execFile(process.execPath, ['--import', 'tsx', CHILD], { env: { ...process.env, REDIS_URL: inject('redisUrl'), ...env } }, (err, stdout, stderr) => {
      clearTimeout(timer);
      resolve({ exited: !killed, code: err ? (err as { code?: number }).code ?? null : 0, stdout, stderr });
    });
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      started.kill('SIGKILL');
    }, waitMs);
  });
}

describe('closeClient', () => {
  it.each(['ioredis', 'node-redis'])('%s: a script whose store owns the client exits after limiter.close()', { timeout: 30_000 }, async (client) => {
    const run = await script({ CLIENT: client, CLOSE_CLIENT: '1' }, 20_000);
    expect(run.stderr).toBe('');
    expect(run).toMatchObject({ exited: true, code: 0 });
    expect(JSON.parse(run.stdout)).toEqual({ allowed: true });
  });

  // docs/stores.md: close() closes the client after the replies in flight. Decisions started just
  // before close() are still waiting for the batch's turn: they must reach Redis, not a closed client.
  it.each(['ioredis', 'node-redis'])('%s: decisions in flight when the limiter closes are decided by Redis', { timeout: 20_000 }, async (kind) => {
    const url = inject('redisUrl');
    const open = async () => (kind === 'ioredis' ? new Redis(url) : await createClient({ url }).connect());
    const policies = { p: { capacity: 100, refillPerSecond: 1 } };
    const key = `inflight-${kind}`;
    const limiter = createLimiter({ store: redisStore({ client: await open(), closeClient: true }), policies, timeoutMs: 5_000 });
    await limiter.reset('p', key);
    const takes = Array.from({ length: 50 }, () => limiter.take('p', key));
    await limiter.close();
    const decisions = await Promise.all(takes);
    expect(decisions.filter((d) => d.reason === 'store_error')).toEqual([]);
    expect(decisions.every((d) => d.allowed)).toBe(true);
    const check = createLimiter({ store: redisStore({ client: await open(), closeClient: true }), policies });
    expect((await check.peek('p', key)).remaining).toBe(50);
    await check.close();
  });

  it('without it, the open client keeps the script alive (the caller closes it)', { timeout: 30_000 }, async () => {
    const run = await script({ CLIENT: 'ioredis', CLOSE_CLIENT: '0' }, 4_000);
    expect(JSON.parse(run.stdout)).toEqual({ allowed: true });
    expect(run.exited).toBe(false);
  });

  it('closes the client once, however often the limiter is closed, and a failed close is a StoreError', async () => {
    const quit = vi.fn(async () => 'OK');
    const io = { call: async () => 'PONG', quit };
    const limiter = createLimiter({ store: redisStore({ client: io, closeClient: true }), policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    await Promise.all([limiter.close(), limiter.close()]);
    await limiter.close();
    expect(quit).toHaveBeenCalledTimes(1);
    const gone = { call: async () => 'PONG', quit: async () => Promise.reject(new Error('gone')) };
    const failing = redisStore({ client: gone, closeClient: true });
    await expect(failing.close!()).rejects.toThrow(/\[edge-limiter\] \[redis\] close failed: gone/);
    // Without closeClient the store has nothing to close, and the client is left alone.
    expect(redisStore({ client: io }).close).toBeUndefined();
    expect(quit).toHaveBeenCalledTimes(1);
  });

  it('mongoStore closes the MongoClient of its collection (collection.db.client)', async () => {
    const close = vi.fn(async () => {});
    const collection = { db: { command: async () => ({ ok: 1 }), client: { close } } } as unknown as MongoCollectionLike;
    const limiter = createLimiter({ store: mongoStore({ collection, closeClient: true }), policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    await limiter.close();
    await limiter.close();
    expect(close).toHaveBeenCalledTimes(1);
    expect(mongoStore({ collection }).close).toBeUndefined();
  });

  it('refuses closeClient at creation where there is nothing to close, naming the field', () => {
    const upstashLike = { evalsha: async () => 0, eval: async () => 0, del: async () => 0, ping: async () => 'PONG' };
    expect(() => redisStore({ client: upstashLike, closeClient: true })).toThrow(ConfigError);
    expect(() => redisStore({ client: upstashLike, closeClient: true })).toThrow(/closeClient needs a client with close\(\) or quit\(\)/);
    const bare = { findOneAndUpdate: async () => null } as unknown as MongoCollectionLike;
    expect(() => mongoStore({ collection: bare, closeClient: true })).toThrow(/closeClient needs a driver Collection/);
  });
});
