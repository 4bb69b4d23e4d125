// The Lua scripts against the exact reference model, on an injected clock (the client-clock ARGV path),
// against a real redis-server: the single-key script, and the batch script deciding several buckets
// in one call. Plus what batching changes at Redis: fewer script calls, the same answers.
import fc from 'fast-check';
import { Redis as IORedis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisProcess } from '../scripts/lib/redis-server.js';
import { createLimiter, type Store } from '../src/index.js';
import { fullAfterMs, step, type BucketState, type StepArgs, type StepResult } from '../src/core/gcra.js';
import { redisStore, type RedisScriptClient } from '../src/stores/redis.js';
import { GCRA_BATCH_SCRIPT, GCRA_BATCH_SCRIPT_SHA, GCRA_SCRIPT_SHA } from '../src/stores/redis-script.js';
import { checkGrantsAgainstModel, checkMultiAgainstModel, ExactBucket, gapUsArb, leaseOpsArb, multiLimitsArb, multiOpsArb, rateArb, takeOpsArb } from './support/exact-bucket.js';

// A server of its own: the batching checks count script calls at Redis, which other files' traffic on
// the shared server would add to.
let redis: RedisProcess;
let io: IORedis;
beforeAll(async () => {
  redis = await startRedis();
  io = new IORedis(redis.url);
});
afterAll(async () => {
  io.disconnect();
  await redis.stop();
});
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
        // The batch script's calls through this store alone (the server's counts include other test files
        // running at once, and the limiter's reading of the policy-wide record).
        let batchCalls = 0;
        const counted = {
          call: (...a: [string, ...unknown[]]) => {
            if ((a[0] === 'EVALSHA' && a[1] === GCRA_BATCH_SCRIPT_SHA) || (a[0] === 'EVAL' && a[1] === GCRA_BATCH_SCRIPT)) batchCalls++;
            return (io.call as (...x: unknown[]) => Promise<unknown>)(...a);
          },
        };
        const store = redisStore({ client: counted as never, clientClock: true, nowMs: () => clockUs / 1000, batch: batched ? { maxSize: 1000 } : false });
        const limiter = createLimiter({ store, policies: { x: { capacity: 500, refillPerSecond } }, prefix: `burst${run++}:` });
        const burst = await Promise.all(Array.from({ length: 999 }, () => limiter.take('x', 'k')));
        if (batched) expect(batchCalls).toBeLessThanOrEqual(3);
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

// Several limits per key: the scripts against core/gcra.ts `step` itself, run on the same clock readings
// (the client-clock ARGV path), step by step: the same verdicts and debts, the same clock reading, and
// the same value stored (read back with GET), with the expiry of its slowest limit.

/** One limit in units, as core/policy.ts derives them for capacity tokens at p / q per second. */
interface Units {
  capacity: number;
  capacityUnits: number;
  tokenUnits: number;
  refillUnitsPerUs: number;
}
const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
function unitsOf(capacity: number, { p, q }: { p: number; q: number }): Units {
  const g = gcd(1_000_000 * q, p);
  return { capacity, capacityUnits: capacity * ((1_000_000 * q) / g), tokenUnits: (1_000_000 * q) / g, refillUnitsPerUs: p / g };
}
/** The debt cap of a wait of maxWaitMs (core/gcra.ts limitUnitsOf). */
const limitOf = (l: Units, maxWaitMs: number) => Math.min(2 ** 52, l.capacityUnits + maxWaitMs * l.refillUnitsPerUs * 1000);

const limitArb = fc.record({ capacity: fc.integer({ min: 1, max: 50 }), rate: rateArb }).map(({ capacity, rate }) => unitsOf(capacity, rate));
/** A cost in tokens: often 0 (that limit is not charged). */
const costArb = fc.oneof({ weight: 1, arbitrary: fc.constant(0) }, { weight: 3, arbitrary: fc.integer({ min: 1, max: 50 }) });

/**
 * One step on a key of `limits`: a take (each limit its own cost in tokens, some 0; with a reservation of
 * maxWaitMs), a peek (every cost 0), an adjustment (charges and refunds) or a refund reckoned from a
 * clock reading (refundSinceUs). `drop` leaves the last limits out, as a policy that lost them would
 * (the next step with all of them reads a bucket stored with fewer).
 */
const multiOpArb = fc.record({
  dtUs: gapUsArb(),
  kind: fc.constantFrom('take', 'take', 'take', 'take', 'peek', 'adjust', 'adjust', 'refund-since'),
  costs: fc.array(costArb, { minLength: 3, maxLength: 3 }),
  refund: fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }),
  maxWaitMs: fc.constantFrom(0, 0, 0, 10, 250, 5000),
  // refund-since: the tokens given back were taken this long before the previous step (below 0: after it).
  backUs: fc.oneof(fc.constant(0), fc.integer({ min: -1000, max: 2000 }), fc.integer({ min: 0, max: 5_000_000 })),
  drop: fc.constantFrom(0, 0, 0, 0, 0, 0, 1),
});
type MultiOp = typeof multiOpArb extends fc.Arbitrary<infer T> ? T : never;

function argsOf(limits: Units[], op: MultiOp, lastAtUs: number): StepArgs {
  const used = limits.slice(0, Math.max(1, limits.length - op.drop));
  const take = op.kind === 'take' || op.kind === 'peek';
  const steps = used.map((l, i) => {
    // Takes charge at most the capacity; adjustments may charge past it (held at limitUnits) or refund.
    const tokens = op.kind === 'peek' ? 0 : take ? Math.min(op.costs[i]!, l.capacity) : op.costs[i]! * (op.refund[i] ? -1 : 1);
    return { costUnits: tokens * l.tokenUnits, limitUnits: limitOf(l, op.maxWaitMs), refillUnitsPerUs: l.refillUnitsPerUs };
  });
  // A take sends its base, as the limiter does: one that waits past a capacity is a reservation, whose
  // due the value keeps ("~<reservedUntilUs>"), which the straight-line takes leave to the general path.
  if (take) return { limits: steps, base: { tokenUnits: used.map((l) => l.tokenUnits), capacityUnits: used.map((l) => l.capacityUnits), maxWaitMs: op.maxWaitMs } };
  return op.kind === 'refund-since' ? { limits: steps, adjust: true, refundSinceUs: lastAtUs - op.backUs } : { limits: steps, adjust: true };
}

/** What a store must answer: core's result without its write. */
const answer = (r: StepResult & { write?: unknown }): StepResult => ({ allowed: r.allowed, debtUnits: r.debtUnits, atUs: r.atUs });
/** The value the scripts store for a state, as they format it (%.0f of each integer). */
const valueOf = (s: BucketState | undefined) => (s === undefined ? null : `${s.debtUnits.join(':')}:${s.atUs}${s.reservedUntilUs === undefined ? '' : `~${s.reservedUntilUs}`}`);
/** Moves a reference state by core's write (undefined: nothing written; null: the key deleted). */
const after = (s: BucketState | undefined, r: { write?: BucketState | null }) => (r.write === undefined ? s : (r.write ?? undefined));

/** The expiry the scripts set for a state written by `args`: when its slowest limit is full, at least 1 s. */
function expiryOf(s: BucketState, args: StepArgs): number {
  return Math.max(1000, ...s.debtUnits.map((d, i) => (d > 0 ? fullAfterMs(d, args.limits[i]!.refillUnitsPerUs) : 0)));
}

/** An adapter in the @upstash/redis shape over ioredis: every decision waits the turn, so concurrent ones share one batch. Counts calls by script. */
function countingClient() {
  const calls = { single: 0, batch: 0 };
  const client: RedisScriptClient = {
    evalsha: (sha, keys, args) => {
      if (sha === GCRA_BATCH_SCRIPT_SHA) calls.batch++;
      else if (sha === GCRA_SCRIPT_SHA) calls.single++;
      return io.evalsha(sha, keys.length, ...keys, ...args);
    },
    eval: (script, keys, args) => io.eval(script, keys.length, ...keys, ...args),
    del: (key) => io.del(key),
    ping: () => io.ping(),
  };
  return { client, calls };
}

describe('several limits per key against core step, on the same clock readings (fake clock, real Redis)', () => {
  for (const n of [2, 3]) {
    it(`single-key script, ${n} limits: takes with some limits uncharged, reservations, peeks, adjustments and refunds (since a reading)`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(limitArb, { minLength: n, maxLength: n }), fc.array(multiOpArb, { minLength: 1, maxLength: 30 }), async (limits, ops) => {
          let nowUs = 1_790_000_000_000_000;
          const store = redisStore({ client: io, clientClock: true, nowMs: () => nowUs / 1000, batch: false });
          const key = `ml${run++}`;
          let state: BucketState | undefined;
          let lastAtUs = nowUs;
          for (const [i, op] of ops.entries()) {
            nowUs += op.dtUs;
            const args = argsOf(limits, op, lastAtUs);
            const want = step(state, nowUs, args);
            const got = await store.step(key, args);
            expect({ i, op: op.kind, ...got }).toEqual({ i, op: op.kind, ...answer(want) });
            state = after(state, want);
            const [stored, pttl] = await Promise.all([io.get(key), io.pttl(key)]);
            expect({ i, stored }).toEqual({ i, stored: valueOf(state) });
            if (state && want.write) {
              const px = expiryOf(state, args);
              expect(pttl).toBeLessThanOrEqual(px);
              expect(pttl).toBeGreaterThan(px - 5000);
            }
            lastAtUs = nowUs;
          }
        }),
        { numRuns: 120 },
      );
    }, 120_000);
  }

  it('batch script: concurrent takes and peeks on one key and on keys of 1, 2 and 3 limits in one call, adjustments between, as core decides them in order', async () => {
    const { client, calls } = countingClient();
    const roundArb = fc.record({
      dtUs: gapUsArb(),
      // Decisions issued together at one clock reading: they go to Redis as one batch, in this order.
      takes: fc.array(fc.record({ key: fc.nat({ max: 3 }), op: multiOpArb.map((o) => ({ ...o, kind: o.kind === 'peek' ? ('peek' as const) : ('take' as const) })) }), { minLength: 1, maxLength: 10 }),
      // Then one adjustment (the single-key script), or none.
      adjust: fc.option(fc.record({ key: fc.nat({ max: 3 }), op: multiOpArb.map((o) => ({ ...o, kind: o.kind === 'refund-since' ? ('refund-since' as const) : ('adjust' as const) })) }), { nil: undefined }),
    });
    let batched = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(fc.array(limitArb, { minLength: 1, maxLength: 3 }), { minLength: 4, maxLength: 4 }), fc.array(roundArb, { minLength: 1, maxLength: 15 }), async (keyLimits, rounds) => {
        let nowUs = 1_790_000_000_000_000;
        const store = redisStore({ client, clientClock: true, nowMs: () => nowUs / 1000, batch: { maxSize: 64 } });
        const keys = keyLimits.map((_, k) => `mlb${run}:${k}`);
        run++;
        const states: (BucketState | undefined)[] = keys.map(() => undefined);
        let lastAtUs = nowUs;
        for (const [r, round] of rounds.entries()) {
          nowUs += round.dtUs;
          const argsList = round.takes.map(({ key, op }) => argsOf(keyLimits[key]!, op, lastAtUs));
          const before = calls.batch;
          const got = await Promise.all(round.takes.map(({ key }, i) => store.step(keys[key]!, argsList[i]!)));
          if (round.takes.length > 1) {
            expect(calls.batch - before).toBe(1);
            batched += round.takes.length;
          }
          round.takes.forEach(({ key, op }, i) => {
            const want = step(states[key], nowUs, argsList[i]!);
            expect({ r, i, key, op: op.kind, ...got[i] }).toEqual({ r, i, key, op: op.kind, ...answer(want) });
            states[key] = after(states[key], want);
          });
          if (round.adjust) {
            const { key, op } = round.adjust;
            const args = argsOf(keyLimits[key]!, op, lastAtUs);
            const want = step(states[key], nowUs, args);
            expect({ r, key, op: op.kind, ...(await store.step(keys[key]!, args)) }).toEqual({ r, key, op: op.kind, ...answer(want) });
            states[key] = after(states[key], want);
          }
          expect({ r, stored: await io.mget(...keys) }).toEqual({ r, stored: states.map(valueOf) });
          lastAtUs = nowUs;
        }
      }),
      { numRuns: 120 },
    );
    // The batch script decided most of them (a round of one decision goes through the single-key script).
    expect(batched).toBeGreaterThan(1000);
    expect(calls.single).toBeGreaterThan(0);
  }, 120_000);

  it('a value stored by gcra v5 ("<debt>:<atUs>", one limit) reads the same, alone and batched; a policy that gained or lost a limit reads a bucket as core does', async () => {
    const nowUs = 1_790_000_000_500_000;
    const store = redisStore({ client: io, clientClock: true, nowMs: () => nowUs / 1000, batch: false });
    const { client } = countingClient();
    const batchStore = redisStore({ client, clientClock: true, nowMs: () => nowUs / 1000, batch: { maxSize: 64 } });
    const one = { costUnits: 3_000, limitUnits: 10_000, refillUnitsPerUs: 1 };
    const two = { costUnits: 7, limitUnits: 50, refillUnitsPerUs: 3 };
    const cases: [string, StepArgs][] = [
      ['', { limits: [one] }],
      ['', { limits: [{ ...one, costUnits: 0 }] }],
      ['', { limits: [{ ...one, costUnits: 9_000 }] }],
      ['', { limits: [{ ...one, costUnits: -2_500 }], adjust: true, refundSinceUs: nowUs - 400 }],
      ['', { limits: [one, two] }],
      ['', { limits: [{ ...one, costUnits: 0 }, two] }],
      [':40', { limits: [one] }],
      [':40', { limits: [one, two] }],
    ];
    // As v5 wrote them (%.0f of the debt and of the clock), and values this store never writes but the
    // Lua and the client read alike (other number forms, a sign, spaces) or alike as a full bucket.
    const stored = (atUs: number) => [
      `5000:${atUs}`,
      `4000:${atUs}`,
      `0:${atUs}`,
      `1:${atUs - 3_000_000}`,
      `5000:${atUs + 1_000}`,
      `5e3:${atUs}`,
      // Digits only, but over 15 of them: replied as integers when below 2^53, else as the value.
      `0000000000000005000:${atUs}`,
      `99999999999999999999:${atUs}`,
      ` 5000 :${atUs}`,
      `-200:${atUs}`,
      `0x1388:${atUs}`,
      `5000::${atUs}`,
      `5000`,
      `x:${atUs}`,
      `5000:`,
      '',
    ];
    let k = 0;
    for (const [extra, args] of cases) {
      for (const base of stored(nowUs - 1_000)) {
        for (const s of [store, batchStore]) {
          const value = base === '' || base === '5000' || base.endsWith(':') ? base : base.replace(/:(\d+)$/, `${extra}:$1`);
          const key = `v5:${k++}`;
          await io.set(key, value);
          // The reference reads the value as the scripts do: numbers joined by ':', the last the clock.
          const parts = value.split(':');
          const nums = parts.map((x) => (x.trim() === '' ? NaN : Number(x)));
          const state = parts.length >= 2 && nums.every(Number.isFinite) ? { debtUnits: nums.slice(0, -1), atUs: nums.at(-1)! } : undefined;
          const want = step(state, nowUs, args);
          // A batch of one goes through the single-key script: two keys make it a batch.
          const [got] = s === store ? [await s.step(key, args)] : await Promise.all([s.step(key, args), s.step(`${key}:other`, args)]);
          expect({ value, args, got }).toEqual({ value, args, got: answer(want) });
          const written = after(state, want);
          if (want.write !== undefined) expect({ value, args, stored: await io.get(key) }).toEqual({ value, args, stored: valueOf(written) });
        }
      }
    }
    // What this version writes for one limit is what v5 wrote and reads: "<debt>:<atUs>".
    await store.step('v5:new', { limits: [one] });
    expect(await io.get('v5:new')).toBe(`3000:${nowUs}`);
  });
});

describe('several limits per key against the BigInt model, through the limiter (fake clock, real Redis)', () => {
  it('takes with a cost per limit or one for all, reservations, adjustments and peeks: the same verdicts and numbers, overall and per limit', async () => {
    await fc.assert(
      fc.asyncProperty(multiLimitsArb, multiOpsArb(), async (specs, ops) => {
        let nowUs = 1_790_000_000_000_000;
        const store = redisStore({ client: io, clientClock: true, nowMs: () => nowUs / 1000 });
        // The model's limiter uses one storage key: each run gets its own.
        const prefix = `mm${run++}:`;
        const own: Store = { name: store.name, step: (k, a, o) => store.step(prefix + k, a, o), reset: (k) => store.reset(prefix + k), ping: () => store.ping() };
        await checkMultiAgainstModel(own, (dt) => (nowUs += dt), specs, ops);
      }),
      { numRuns: 120 },
    );
  }, 120_000);
});
