// One failed store request is one breaker failure, however many decisions it carried: a Redis batch
// (or an auto-pipelined @upstash/redis request) rejects each of its decisions, with one error object.
import { Redis as IORedis } from 'ioredis';
import { Redis as UpstashRedis } from '@upstash/redis';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { createLimiter, memoryStore, type Store } from '../src/index.js';
import { redisStore, type RedisScriptClient } from '../src/stores/redis.js';

const flush = () => new Promise((r) => setImmediate(r));

/**
 * A store that gathers the calls of one turn into one "request", as the Redis store batches them,
 * and answers them from a memory store, or rejects them all with `failNext` (one error object) or
 * with `failEach` (one error object per call).
 */
function batchingStore() {
  const inner = memoryStore();
  let batch: { key: string; args: Parameters<Store['step']>[1]; resolve(v: unknown): void; reject(e: unknown): void }[] = [];
  const s = {
    name: 'batching',
    requests: 0,
    steps: 0,
    failNext: undefined as Error | undefined,
    step(key: string, args: Parameters<Store['step']>[1]) {
      s.steps++;
      return new Promise((resolve, reject) => {
        if (batch.length === 0) setImmediate(send);
        batch.push({ key, args, resolve, reject });
      }) as ReturnType<Store['step']>;
    },
    reset: (key: string) => inner.reset(key),
    ping: async () => {},
  };
  function send() {
    const b = batch;
    batch = [];
    s.requests++;
    const error = s.failNext;
    s.failNext = undefined;
    for (const p of b) {
      // Each decision gets its own wrapper, as the stores wrap a client error, around the one cause.
      if (error) p.reject(new Error(`store failed: ${error.message}`, { cause: error }));
      else p.resolve(inner.stepSync(p.key, p.args));
    }
  }
  return s;
}

describe('a failed batch counts once on the circuit breaker', () => {
  it('one failed request of 64 decisions does not open a breaker whose threshold is 5; the next decisions reach the store', async () => {
    const store = batchingStore();
    const limiter = createLimiter({ store, circuitBreaker: { failureThreshold: 5, cooldownMs: 60_000 }, policies: { p: { capacity: 1000, refillPerSecond: 1 } } });
    store.failNext = new Error('ECONNRESET');
    const failed = await Promise.all(Array.from({ length: 64 }, (_, i) => limiter.take('p', `k${i}`)));
    expect(store.requests).toBe(1);
    expect(failed.filter((d) => d.reason === 'store_error')).toHaveLength(64);
    expect(limiter.stats().circuit).toBe('closed');
    const healthy = await Promise.all(Array.from({ length: 16 }, (_, i) => limiter.take('p', `k${i}`)));
    expect(healthy.every((d) => d.allowed && d.reason === undefined)).toBe(true);
    expect(store.steps).toBe(80);
  });

  it('five failed requests still open it, also when a client rejects every request with the same error object', async () => {
    const store = batchingStore();
    const limiter = createLimiter({ store, circuitBreaker: { failureThreshold: 5, cooldownMs: 60_000 }, policies: { p: { capacity: 1000, refillPerSecond: 1 } } });
    const reused = new Error('Connection is closed.');
    for (let i = 0; i < 4; i++) {
      store.failNext = reused;
      await Promise.all(Array.from({ length: 8 }, (_, j) => limiter.take('p', `k${j}`)));
      expect(limiter.stats().circuit).toBe('closed');
    }
    store.failNext = reused;
    await Promise.all(Array.from({ length: 8 }, (_, j) => limiter.take('p', `k${j}`)));
    expect(limiter.stats().circuit).toBe('open');
    const steps = store.steps;
    expect((await limiter.take('p', 'k0')).reason).toBe('store_error');
    expect(store.steps).toBe(steps); // failing fast
  });
});

describe('a failed batch on the Redis store (real redis-server)', () => {
  let io: IORedis;
  beforeAll(() => {
    io = new IORedis(inject('redisUrl'));
  });
  afterAll(async () => {
    await io.quit();
  });

  it('one failed EVALSHA of a batch of 64 rejects its 64 decisions but opens no circuit (threshold 5)', async () => {
    let failures = 0;
    let evalshas = 0;
    // An adapter in the @upstash/redis shape (batches wait for the turn, as over HTTP) in front of ioredis.
    const client: RedisScriptClient = {
      evalsha: async (sha, keys, args) => {
        evalshas++;
        if (failures > 0) {
          failures--;
          throw new Error('fetch failed: ECONNRESET');
        }
        return io.evalsha(sha, keys.length, ...keys, ...args);
      },
      eval: async (script, keys, args) => io.eval(script, keys.length, ...keys, ...args),
      del: (key) => io.del(key),
      ping: () => io.ping(),
    };
    const prefix = `batchfail-${Date.now()}:`;
    const limiter = createLimiter({
      store: redisStore({ client }),
      prefix,
      circuitBreaker: { failureThreshold: 5, cooldownMs: 60_000 },
      policyRefreshMs: 60_000,
      policies: { p: { capacity: 10, refillPerSecond: 1 } },
    });
    // This node's policy-wide reading (one script call per policyRefreshMs, before its first decision)
    // is made first, so the one failed EVALSHA below is the batch of decisions and what is counted is
    // the decisions' own calls.
    await limiter.peek('p', 'warm-up');
    const before = evalshas;
    failures = 1;
    const first = await Promise.all(Array.from({ length: 64 }, (_, i) => limiter.take('p', `k${i}`)));
    expect(evalshas - before).toBe(1);
    expect(first.filter((d) => d.reason === 'store_error')).toHaveLength(64);
    expect(limiter.stats().circuit).toBe('closed');
    const next = await Promise.all(Array.from({ length: 16 }, (_, i) => limiter.take('p', `k${i}`)));
    expect(next.every((d) => d.allowed && d.reason === undefined && d.remaining === 9)).toBe(true);
    expect(evalshas - before).toBe(2);
    await flush();
  });
});

describe('a failed request of @upstash/redis (auto-pipelining)', () => {
  for (const batch of [false, true]) {
    it(`16 decisions in one HTTP request that fails count once (${batch ? "the store's batch" : 'batch: false, one EVALSHA each, auto-pipelined'})`, async () => {
      // Nothing listens on port 9: the one pipelined request fails, and @upstash/redis rejects every
      // command in it with the same error (which the store wraps once per decision, as its cause).
      const client = new UpstashRedis({ url: 'http://127.0.0.1:9', token: 't', retry: false });
      const errors: unknown[] = [];
      const limiter = createLimiter({
        store: redisStore({ client, ...(batch ? {} : { batch: false }) }),
        circuitBreaker: { failureThreshold: 5, cooldownMs: 60_000 },
        onDecision: (e) => errors.push(e.error),
        policies: { p: { capacity: 10, refillPerSecond: 1 } },
      });
      const got = await Promise.all(Array.from({ length: 16 }, (_, i) => limiter.take('p', `k${i}`)));
      expect(got.filter((d) => d.reason === 'store_error')).toHaveLength(16);
      const root = (e: unknown) => {
        let x = e;
        while (x instanceof Error && x.cause !== undefined) x = x.cause;
        return x;
      };
      expect(new Set(errors.map(root)).size).toBe(1);
      expect(limiter.stats().circuit).toBe('closed');
    });
  }
});
