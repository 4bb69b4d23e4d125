// Redis-specific guarantees, measured at Redis itself (INFO commandstats, PTTL, SCRIPT LOAD).
import { afterAll, beforeAll, describe, expect, it, inject, vi } from 'vitest';
import { createHash } from 'node:crypto';
import { Redis as IORedis } from 'ioredis';
import { createClient } from 'redis';
import { createLimiter, StoreError } from '../src/index.js';
import { redisStore, type RedisScriptClient } from '../src/stores/redis.js';
import { GCRA_SCRIPT, GCRA_SCRIPT_SHA } from '../src/stores/redis-script.js';
import { startRedis } from '../scripts/lib/redis-server.js';
import { commandStats } from './support/redis-stats.js';

const policies = { p: { capacity: 10, refillPerSecond: 1 } };

describe('redis store', () => {
  let admin: IORedis;
  beforeAll(() => {
    admin = new IORedis(inject('redisUrl'));
  });
  afterAll(() => admin.disconnect());

  it("reads the limiter's abort signal only for a client that takes one (the redis package, an adapter with takesSignal), alone and batched", async () => {
    const io = new IORedis(inject('redisUrl'));
    const nr = createClient({ url: inject('redisUrl') });
    await nr.connect();
    // Custom adapters over ioredis, recording the signals their script calls are given.
    const received: (AbortSignal | undefined)[] = [];
    const adapter = (takesSignal: boolean): RedisScriptClient => ({
      evalsha: (sha, keys, args, signal) => (received.push(signal), io.call('EVALSHA', sha, keys.length, ...keys, ...args)),
      eval: (script, keys, args, signal) => (received.push(signal), io.call('EVAL', script, keys.length, ...keys, ...args)),
      del: (key) => io.del(key),
      ping: () => io.ping(),
      takesSignal,
    });
    try {
      for (const [client, expected] of [[io, 0], [nr, 1], [adapter(false), 0], [adapter(true), 1]] as const) {
        received.length = 0;
        const store = redisStore({ client });
        let reads = 0;
        const options = {
          timeoutMs: 1000,
          get signal() {
            reads++;
            return new AbortController().signal;
          },
        };
        await store.step('sig:alone', { limits: [{ costUnits: 1, limitUnits: 10, refillUnitsPerUs: 1 }] }, options);
        expect(reads).toBe(expected);
        reads = 0;
        await Promise.all(Array.from({ length: 10 }, (_, i) => store.step(`sig:b${i}`, { limits: [{ costUnits: 1, limitUnits: 10, refillUnitsPerUs: 1 }] }, options)));
        expect(reads).toBe(expected * 10);
        if (client !== io && client !== nr) {
          // An adapter is given a signal exactly when it takes one (the batch's own, when batched).
          expect(received.length).toBeGreaterThanOrEqual(2);
          expect(received.every((sig) => (sig instanceof AbortSignal) === (expected === 1))).toBe(true);
        }
      }
    } finally {
      io.disconnect();
      await nr.quit();
    }
  });

  it('an adapter with takesSignal sees its hung call aborted at the policy timeout, and the fail mode decides', async () => {
    let given: AbortSignal | undefined;
    const hung: RedisScriptClient = {
      evalsha: (_sha, _keys, _args, signal) =>
        new Promise((_resolve, reject) => {
          given = signal;
          signal?.addEventListener('abort', () => reject(signal.reason as Error));
        }),
      eval: () => Promise.reject(new Error('not reached')),
      del: async () => 0,
      ping: async () => 'PONG',
      takesSignal: true,
    };
    const limiter = createLimiter({ store: redisStore({ client: hung }), policies: { p: { capacity: 1, refillPerSecond: 1, timeoutMs: 50, onStoreError: 'deny' } } });
    const t0 = performance.now();
    const d = await limiter.take('p', 'k');
    expect(d).toMatchObject({ allowed: false, reason: 'store_error' });
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(given?.aborted).toBe(true);
  });

  it('reports the debt from the store clock to the microsecond, alone and batched (bracketed by TIME before and after)', async () => {
    // The script replies with TIME's reading and the value it read, not a debt: the client redoes the
    // arithmetic. One connection carries TIME, the steps and TIME again, so Redis runs them in that order.
    const store = redisStore({ client: admin });
    // 1 unit per µs: a cost of 1e6 units is one second of refill.
    const args = { limits: [{ costUnits: 1_000_000, limitUnits: 1_000_000_000, refillUnitsPerUs: 1 }] };
    const timeUs = async () => {
      const [sec, usec] = (await admin.time()) as unknown as [string, string];
      return Number(sec) * 1_000_000 + Number(usec);
    };
    for (let round = 0; round < 20; round++) {
      // Five at once: the first goes alone (the single-key script), the other four as one batch.
      const keys = Array.from({ length: 5 }, (_, i) => `clock${Date.now()}:${round}:${i}`);
      await Promise.all(keys.map((k) => store.step(k, args)));
      const stored = await Promise.all(keys.map(async (k) => (await admin.get(k))!.split(':').map(Number) as [number, number]));
      const before = await timeUs();
      const results = await Promise.all(keys.map((k) => store.step(k, args)));
      const after = await timeUs();
      results.forEach((r, i) => {
        // debt = stored debt - (now - atUs) + cost, for a now between the two readings: exact integers.
        const [debt, atUs] = stored[i]!;
        expect(r.allowed).toBe(true);
        expect(r.debtUnits).toHaveLength(1);
        expect(Number.isInteger(r.debtUnits[0])).toBe(true);
        expect(r.debtUnits[0]).toBeGreaterThanOrEqual(debt - (after - atUs) + 1_000_000);
        expect(r.debtUnits[0]).toBeLessThanOrEqual(debt - (before - atUs) + 1_000_000);
      });
    }
  });

  it('a stored value the script and the client read differently ("inf" set by hand) is a store error, alone and batched', async () => {
    // Lua's tonumber reads "inf" as infinity (a refusal); JavaScript's Number reads NaN (a full bucket).
    // The client's step then disagrees with the script's verdict, so the reply is not trusted.
    const store = redisStore({ client: admin });
    const keys = Array.from({ length: 5 }, (_, i) => `inf${Date.now()}:${i}`);
    for (const k of keys) await admin.set(k, `inf:${Date.now() * 1000}`);
    const results = await Promise.allSettled(keys.map((k) => store.step(k, { limits: [{ costUnits: 1, limitUnits: 10, refillUnitsPerUs: 1 }] })));
    for (const r of results) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toBeInstanceOf(StoreError);
      expect(String((r as PromiseRejectedResult).reason.message)).toMatch(/unexpected script reply/);
    }
  });

  it('stores the SHA that Redis computes for the script', async () => {
    expect(createHash('sha1').update(GCRA_SCRIPT).digest('hex')).toBe(GCRA_SCRIPT_SHA);
    expect(await admin.script('LOAD', GCRA_SCRIPT)).toBe(GCRA_SCRIPT_SHA);
  });

  it('one EVALSHA per decision; after SCRIPT FLUSH one EVAL, then back to EVALSHA (counted at Redis)', async () => {
    // A dedicated server, so that other test files' traffic cannot disturb the counts.
    const redis = await startRedis();
    const client = new IORedis(redis.url);
    const stats = new IORedis(redis.url);
    try {
      const limiter = createLimiter({ store: redisStore({ client }), policies, prefix: 'rt:' });
      await limiter.take('p', 'warm');
      await stats.config('RESETSTAT');
      for (let i = 0; i < 20; i++) await limiter.take('p', `k${i % 3}`);
      let s = await commandStats(stats);
      expect(s.evalsha).toEqual({ calls: 20, failed: 0, rejected: 0 });
      expect(s.eval).toBeUndefined();
      // Nothing but the script (and the commands it runs inside) reached Redis.
      expect(Object.keys(s).filter((c) => !['evalsha', 'time', 'get', 'set', 'info', 'config|resetstat'].includes(c))).toEqual([]);

      await stats.script('FLUSH');
      await stats.config('RESETSTAT');
      expect((await limiter.take('p', 'after-flush')).allowed).toBe(true);
      s = await commandStats(stats);
      // Redis counts the refused EVALSHA as a call that failed.
      expect(s.evalsha).toEqual({ calls: 1, failed: 1, rejected: 0 });
      expect(s.eval!.calls).toBe(1);
      await stats.config('RESETSTAT');
      for (let i = 0; i < 5; i++) await limiter.take('p', 'after-flush');
      s = await commandStats(stats);
      expect(s.evalsha).toEqual({ calls: 5, failed: 0, rejected: 0 });
      expect(s.eval).toBeUndefined();
    } finally {
      client.disconnect();
      stats.disconnect();
      await redis.stop();
    }
  });

  it('writes {prefix}{policy}:{key} with a PEXPIRE equal to the time until full', async () => {
    const limiter = createLimiter({ store: redisStore({ client: admin }), policies, prefix: 'layout:' });
    const t0 = performance.now();
    const d = await limiter.take('p', 'user:1', { cost: 4 });
    const ttl = await admin.pttl('layout:p:user:1');
    expect(ttl).toBeGreaterThan(d.resetAfterMs! - 100);
    expect(ttl).toBeLessThanOrEqual(d.resetAfterMs! + 1);
    // "<debt>:<atUs>": four tokens at 1/s are 4e6 units of 1 µs, at the server's clock in whole µs.
    const [debt, atUs] = (await admin.get('layout:p:user:1'))!.split(':').map(Number) as [number, number];
    const [sec, usec] = (await admin.time()) as unknown as [string, string];
    const nowUs = Number(sec) * 1_000_000 + Number(usec);
    expect(debt).toBe(4 * limiter.policy('p')!.tokenUnits);
    expect(nowUs - atUs).toBeGreaterThanOrEqual(0);
    expect(nowUs - atUs).toBeLessThanOrEqual((performance.now() - t0) * 1000 + 1000);
  });

  it('sends no caller timestamp, and a caller clock hours off changes nothing', async () => {
    const seen: string[][] = [];
    const io = new IORedis(inject('redisUrl'));
    const recording: RedisScriptClient = {
      evalsha: (sha, keys, args) => (seen.push(args), io.call('EVALSHA', sha, keys.length, ...keys, ...args)),
      eval: (script, keys, args) => (seen.push(args), io.call('EVAL', script, keys.length, ...keys, ...args)),
      del: (key) => io.del(key),
      ping: () => io.ping(),
    };
    const limiter = createLimiter({ store: redisStore({ client: recording }), policies, prefix: `skew${Date.now()}:` });
    try {
      const t0 = performance.now();
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(Date.now() + 3 * 3600_000);
      const a = await limiter.take('p', 'k', { cost: 5 });
      vi.setSystemTime(Date.now() - 6 * 3600_000);
      const b = await limiter.take('p', 'k', { cost: 5 });
      vi.useRealTimers();
      expect(a).toMatchObject({ allowed: true, remaining: 5 });
      expect(b).toMatchObject({ allowed: true, remaining: 0 });
      expect(b.resetAfterMs).toBeGreaterThanOrEqual(10_000 - (performance.now() - t0) - 1);
      expect(b.resetAfterMs).toBeLessThanOrEqual(10_000);
      // ARGV[1] is the clock, in both scripts: "" reads the server's.
      expect(seen.every((args) => args[0] === '')).toBe(true);
    } finally {
      vi.useRealTimers();
      io.disconnect();
    }
  });

  it('says clearly when the server refuses TIME in scripts, and the client-clock opt-in works there', async () => {
    const redis = await startRedis({ extraArgs: ['--rename-command', 'TIME', '""'] });
    const client = new IORedis(redis.url);
    try {
      const store = redisStore({ client });
      const err = await store.step('k', { limits: [{ costUnits: 1000, limitUnits: 2000, refillUnitsPerUs: 1 }] }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreError);
      expect((err as Error).message).toMatch(/refused TIME inside a script/);
      expect((err as Error).message).toMatch(/clientClock: true/);
      const limiter = createLimiter({ store: redisStore({ client, clientClock: true }), policies });
      expect(await limiter.take('p', 'k', { cost: 10 })).toMatchObject({ allowed: true, remaining: 0 });
      expect((await limiter.take('p', 'k')).allowed).toBe(false);
    } finally {
      client.disconnect();
      await redis.stop();
    }
  });

  it('rejects a client it cannot drive, at creation', () => {
    expect(() => redisStore({ client: {} as never })).toThrow(/client/);
  });
});
