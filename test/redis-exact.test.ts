// The Lua scripts against the exact reference model, on an injected clock (the client-clock ARGV path),
// against a real redis-server: the single-key script, and the batch script deciding several buckets
// in one call. Plus what batching changes at Redis: fewer script calls, the same answers.
import fc from 'fast-check';
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, it, inject } from 'vitest';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { GCRA_BATCH_SCRIPT, GCRA_BATCH_SCRIPT_SHA } from '../src/stores/redis-script.js';
import { checkGrantsAgainstModel, ExactBucket, leaseOpsArb, rateArb, takeOpsArb } from './support/exact-bucket.js';

const io = new IORedis(inject('redisUrl'));
afterAll(() => io.disconnect());
let run = 0;

const opsArb = takeOpsArb(40);

async function scriptCalls(): Promise<number> {
  const info = await io.info('commandstats');
  return ['evalsha', 'eval'].reduce((n, c) => n + Number(new RegExp(`cmdstat_${c}:calls=(\\d+)`).exec(info)?.[1] ?? 0), 0);
}

describe('Lua scripts against the exact model (fake clock, real Redis)', () => {
  for (const batched of [false, true]) {
    it(`${batched ? 'batch script, 4 buckets per call' : 'single-key script'}: same decisions, remaining, waitMs and retryAfterMs`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 1, max: 50 }),
          rateArb,
          fc.array(opsArb, { minLength: batched ? 4 : 1, maxLength: batched ? 4 : 1 }),
          async (capacity, { p, q }, perKey) => {
            // The clock sent, in whole µs at an epoch's magnitude (nowMs is read as nowUs / 1000).
            let nowUs = 1_790_000_000_000_000;
            const store = redisStore({ client: io, clientClock: true, nowMs: () => nowUs / 1000, batch: batched ? { maxSize: 64 } : false });
            const limiter = createLimiter({ store, policies: { x: { capacity, refillPerSecond: p / q } }, prefix: `ex${run++}:` });
            const models = perKey.map(() => new ExactBucket(capacity, BigInt(p), BigInt(q)));
            const steps = Math.max(...perKey.map((o) => o.length));
            let t = 0;
            for (let s = 0; s < steps; s++) {
              // Every key's s-th op at one instant: issued together, they share one script call.
              const dt = perKey[0]![s]?.dtUs ?? 100;
              t += dt;
              nowUs += dt;
              const got = await Promise.all(
                perKey.map((ops, k) => {
                  const op = ops[s];
                  return op ? limiter.take('x', `k${k}`, { cost: Math.min(op.cost, capacity), maxWaitMs: op.maxWaitMs }) : undefined;
                }),
              );
              perKey.forEach((ops, k) => {
                const op = ops[s];
                if (!op) return;
                const want = models[k]!.take(t, Math.min(op.cost, capacity), op.maxWaitMs);
                const g = got[k]!;
                expect({ allowed: g.allowed, remaining: g.remaining, waitMs: g.waitMs, retryAfterMs: g.retryAfterMs }).toEqual(want);
              });
            }
          },
        ),
        { numRuns: batched ? 80 : 150 },
      );
    }, 60_000);
  }
});

describe('a full bucket at one instant, in one script call (fake clock, real Redis)', () => {
  // The review's case: at 1e6/s, 999 takes in one batched call on a bucket of 500 admitted 513.
  for (const batched of [false, true]) {
    it(`${batched ? 'batch script' : 'single-key script'}: exactly the capacity at every rate, then exactly 10 ms of refill`, async () => {
      for (const refillPerSecond of [1e6, 999_999, 5e5, 2e5, 1e5, 1e4, 5000, 1]) {
        const nowUs = 1_790_000_000_123_456;
        let clockUs = nowUs;
        const store = redisStore({ client: io, clientClock: true, nowMs: () => clockUs / 1000, batch: batched ? { maxSize: 1000 } : false });
        const limiter = createLimiter({ store, policies: { x: { capacity: 500, refillPerSecond } }, prefix: `burst${run++}:` });
        const before = await scriptCalls();
        const burst = await Promise.all(Array.from({ length: 999 }, () => limiter.take('x', 'k')));
        if (batched) expect((await scriptCalls()) - before).toBeLessThanOrEqual(3);
        expect({ refillPerSecond, admitted: burst.filter((d) => d.allowed).length }).toEqual({ refillPerSecond, admitted: 500 });
        expect(burst.slice(0, 500).map((d) => d.remaining)).toEqual(Array.from({ length: 500 }, (_, i) => 499 - i));
        clockUs += 10_000;
        const refill = await Promise.all(Array.from({ length: 999 }, () => limiter.take('x', 'k')));
        expect({ refillPerSecond, admitted: refill.filter((d) => d.allowed).length }).toEqual({ refillPerSecond, admitted: Math.min(500, Math.floor(refillPerSecond / 100)) });
      }
    });
  }

  it('capacity 1 at 1e6/s: three takes at one instant admit one', async () => {
    const clockUs = 1_790_000_000_000_001;
    const store = redisStore({ client: io, clientClock: true, nowMs: () => clockUs / 1000, batch: { maxSize: 64 } });
    const limiter = createLimiter({ store, policies: { x: { capacity: 1, refillPerSecond: 1e6 } }, prefix: `one${run++}:` });
    const d = await Promise.all([limiter.take('x', 'k'), limiter.take('x', 'k'), limiter.take('x', 'k')]);
    expect(d.map((x) => [x.allowed, x.remaining])).toEqual([
      [true, 0],
      [false, 0],
      [false, 0],
    ]);
  });
});

describe('lease grants and refunds in the Lua script against the exact model (fake clock, real Redis)', () => {
  it('partial grants take the whole tokens that exist, refunds never overfill, takes in between agree', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 50 }), rateArb, leaseOpsArb(), async (capacity, { p, q }, ops) => {
        let nowUs = 1_790_000_000_000_000;
        const store = redisStore({ client: io, clientClock: true, nowMs: () => nowUs / 1000 });
        await checkGrantsAgainstModel(store, `lease${run++}`, (dt) => (nowUs += dt), capacity, p, q, ops);
      }),
      { numRuns: 150 },
    );
  }, 60_000);
});

describe('automatic batching at Redis', () => {
  it('Redis computes the stored SHA of the batch script', async () => {
    expect(await io.script('LOAD', GCRA_BATCH_SCRIPT)).toBe(GCRA_BATCH_SCRIPT_SHA);
  });

  it('200 concurrent decisions on distinct keys take 5 script calls (the first at once, then 64 + 64 + 64 + 7); a lone decision takes 1', async () => {
    const limiter = createLimiter({ store: redisStore({ client: io }), policies: { p: { capacity: 5, refillPerSecond: 1 } }, prefix: `bt${run++}:` });
    await limiter.take('p', 'warm'); // loads the single-key script
    await Promise.all(Array.from({ length: 64 }, (_, i) => limiter.take('p', `w${i}`))); // loads the batch script
    const before = await scriptCalls();
    const all = await Promise.all(Array.from({ length: 200 }, (_, i) => limiter.take('p', `k${i}`)));
    expect((await scriptCalls()) - before).toBe(5);
    expect(all.every((d) => d.allowed && d.remaining === 4 && d.reason === undefined)).toBe(true);
    const one = await scriptCalls();
    expect(await limiter.take('p', 'alone')).toMatchObject({ allowed: true, remaining: 4 });
    expect((await scriptCalls()) - one).toBe(1);
  });

  it('one bucket asked 30 times at once admits exactly its capacity, in the order asked, in three pipelined calls (1 + 8 + 21)', async () => {
    const limiter = createLimiter({ store: redisStore({ client: io }), policies: { p: { capacity: 10, refillPerSecond: 0.001 } }, prefix: `bo${run++}:` });
    await Promise.all(Array.from({ length: 3 }, (_, i) => limiter.take('p', `warm${i}`))); // loads both scripts
    const before = await scriptCalls();
    const all = await Promise.all(Array.from({ length: 30 }, () => limiter.take('p', 'hot')));
    // The first goes at once (nothing in flight); with one call in flight, the 8th waiting decision
    // (half the previous turn's, at least 8) sends its group early; the other 21 go at the turn's end.
    expect((await scriptCalls()) - before).toBe(3);
    expect(all.map((d) => d.allowed)).toEqual([...Array(10).fill(true), ...Array(20).fill(false)]);
    expect(all.slice(0, 10).map((d) => d.remaining)).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
  });

  it('batch: false sends one call per decision', async () => {
    const limiter = createLimiter({ store: redisStore({ client: io, batch: false }), policies: { p: { capacity: 5, refillPerSecond: 1 } }, prefix: `bf${run++}:` });
    await limiter.take('p', 'warm');
    const before = await scriptCalls();
    await Promise.all(Array.from({ length: 20 }, (_, i) => limiter.take('p', `k${i}`)));
    expect((await scriptCalls()) - before).toBe(20);
    expect(() => redisStore({ client: io, batch: { maxSize: 0 } })).toThrow(/batch\.maxSize/);
    expect(() => redisStore({ client: io, nowMs: () => 0 })).toThrow(/nowMs/);
  });
});
