// settle() never loses the work's result to a failed settlement (issue 32, item 2): a real redis-server
// is killed (or paused) while the work runs; the work returns, settle resolves with its result, and the
// settlement that could not be applied goes to onSettleError, whose retry() applies it, once.
import { Redis as IORedis } from 'ioredis';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLimiter, settle, StoreError, type SettleFailure } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { startRedis, type RedisProcess } from '../scripts/lib/redis-server.js';

const POLICIES = { llm: { capacity: 10, refillPerSecond: 1 / 3600 } };
let redis: RedisProcess | undefined;
let client: IORedis | undefined;

afterEach(async () => {
  client?.disconnect();
  await redis?.stop();
});

async function setup() {
  redis = await startRedis();
  client = new IORedis(redis.url, { maxRetriesPerRequest: 1 });
  client.on('error', () => {}); // the kill's ECONNREFUSED, expected
  return createLimiter({ store: redisStore({ client }), policies: POLICIES, timeoutMs: 500, circuitBreaker: false });
}

describe('settle() when the store fails during the work', () => {
  it('redis-server killed while the work runs: the result comes back, and the failed settlement is reported with its charge', async () => {
    const limiter = await setup();
    const failures: SettleFailure[] = [];
    const result = await settle(limiter, { policy: 'llm', key: 'org', estimate: 5, actual: (r: { tokens: number }) => r.tokens, onSettleError: (f) => failures.push(f) }, async () => {
      const gone = new Promise((r) => redis!.process.once('exit', r));
      redis!.process.kill('SIGKILL');
      await gone;
      return { tokens: 2, text: 'the paid-for answer' };
    });
    expect(result).toEqual({ tokens: 2, text: 'the paid-for answer' });
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ policy: 'llm', key: 'org', cost: 2 });
    expect(failures[0]!.charge).toMatch(/^[0-9a-f-]{36}$/);
    expect(failures[0]!.error).toBeInstanceOf(StoreError);
  });

  it('without onSettleError it warns once, and the result still comes back', async () => {
    const limiter = await setup();
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    try {
      const result = await settle(limiter, { policy: 'llm', key: 'org', estimate: 5, actual: () => 1 }, async () => {
        redis!.process.kill('SIGKILL');
        await new Promise((r) => redis!.process.once('exit', r));
        return 'done';
      });
      expect(result).toBe('done');
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(/"policy":"llm","key":"org","charge":"[0-9a-f-]{36}","cost":1/);
    } finally {
      warn.mockRestore();
    }
  });

  it('redis-server paused while the work runs: the result comes back, and retry() settles the charge once after it resumes', async () => {
    const limiter = await setup();
    const failures: SettleFailure[] = [];
    const result = await settle(limiter, { policy: 'llm', key: 'org', estimate: 5, actual: () => 2, onSettleError: (f) => failures.push(f) }, async () => {
      redis!.process.kill('SIGSTOP');
      return 'answer';
    });
    expect(result).toBe('answer');
    expect(failures).toHaveLength(1);
    redis!.process.kill('SIGCONT');
    // The settlement sent while Redis was paused may have run when it resumed; the retry applies it at most once.
    const settled = await failures[0]!.retry();
    expect(settled.remaining).toBe(8);
    expect((await failures[0]!.retry()).repeated).toBe(true);
    expect((await limiter.peek('llm', 'org')).remaining).toBe(8);
  });
});
