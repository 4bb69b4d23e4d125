// Override records in Redis (issue 31) against core/override.ts itself, on an injected clock (the
// client-clock ARGV path) and a real redis-server: steps of every kind (takes, peeks, reservations,
// adjustments, late refunds, grants) under a key's own numbers, a block, a policy-wide change and their
// expiry, mixed with override() and reset() calls, through the single-key script and the batch script.
// Each step must give core's result, store core's write in the value format of ./redis-record.ts, and
// set the expiry of the PX rules (the key lives while the record does, and until the bucket is full).
import fc from 'fast-check';
import { Redis as IORedis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisProcess } from '../scripts/lib/redis-server.js';
import { settleArgs, SETTLE_OP, stepArgs, type BucketState, type StepArgs, type StepResult } from '../src/core/gcra.js';
import { resolvePolicy } from '../src/core/policy.js';
import { memoryStore } from '../src/stores/memory.js';
import type { Store } from '../src/store.js';
import { createLimiter } from '../src/index.js';
import { applyOverride, baseNumbers, carryDebt, numbersAt, numbersLive, stepWithRecord, type OverrideArgs, type OverrideLimit, type OverrideRecord } from '../src/core/override.js';
import { redisStore, type RedisScriptClient } from '../src/stores/redis.js';
import { GCRA_BATCH_SCRIPT, GCRA_BATCH_SCRIPT_SHA, GCRA_SCRIPT } from '../src/stores/redis-script.js';
import { OVERRIDE_SCRIPT, OVERRIDE_SCRIPT_SHA } from '../src/stores/redis-override.js';
import { valueText } from '../src/stores/redis-value.js';
import { gapUsArb, rateArb } from './support/exact-bucket.js';

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

const MAX_WAIT_MS = 3_600_000;
const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
/** One limit's numbers, as core/policy.ts derives them for capacity tokens at p / q per second. */
function numbersOf(capacity: number, { p, q }: { p: number; q: number }): OverrideLimit {
  const g = gcd(1_000_000 * q, p);
  const tokenUnits = (1_000_000 * q) / g;
  return { tokenUnits, capacityUnits: capacity * tokenUnits, refillUnitsPerUs: p / g };
}
const numbersArb = fc.record({ capacity: fc.integer({ min: 1, max: 50 }), rate: rateArb }).map(({ capacity, rate }) => numbersOf(capacity, rate));
const limitOf = (l: OverrideLimit, maxWaitMs: number) => (maxWaitMs === 0 ? l.capacityUnits : Math.min(2 ** 52, l.capacityUnits + maxWaitMs * l.refillUnitsPerUs * 1000));
const costArb = fc.oneof({ weight: 1, arbitrary: fc.constant(0) }, { weight: 3, arbitrary: fc.integer({ min: 1, max: 50 }) });

/** One operation on a key of n limits: a step under one of two policy-wide changes (or none), an override, or a reset. */
const opArb = (n: number) =>
  fc.record({
    dtUs: gapUsArb(),
    op: fc.oneof(
      {
        weight: 6,
        arbitrary: fc.record({
          type: fc.constant('step' as const),
          kind: fc.constantFrom(...(n === 1 ? (['take', 'take', 'take', 'peek', 'adjust', 'refund-since', 'grant'] as const) : (['take', 'take', 'take', 'peek', 'adjust', 'refund-since'] as const))),
          costs: fc.array(costArb, { minLength: n, maxLength: n }),
          refund: fc.array(fc.boolean(), { minLength: n, maxLength: n }),
          maxWaitMs: fc.constantFrom(0, 0, 10, 250, 5000),
          backUs: fc.integer({ min: -1000, max: 3_000_000 }),
          policy: fc.constantFrom(undefined, undefined, 0, 1),
          // Without a change: this node's reading that found none (StepArgs.policySeenUs), µs after the start.
          seenUs: fc.option(fc.integer({ min: 0, max: 5_000_000 }), { nil: undefined }),
          // StepArgs.policyHoldMs: how long a copy or marker the step writes is kept at least.
          holdMs: fc.constantFrom(undefined, 0, 20_000),
        }),
      },
      {
        weight: 3,
        arbitrary: fc.record({
          type: fc.constant('override' as const),
          limits: fc.oneof(fc.constant(undefined), fc.constant(null), fc.array(numbersArb, { minLength: n, maxLength: n })),
          // Short enough to end within the steps' gaps (the expiry split), or long enough that an expiry
          // missing the record's end is told from the one set, whatever the machine's pace.
          forMs: fc.option(fc.oneof(fc.integer({ min: 0, max: 4000 }), fc.integer({ min: 30_000, max: 600_000 })), { nil: undefined }),
          blockForMs: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 3000 }) }, { weight: 1, arbitrary: fc.integer({ min: 30_000, max: 600_000 }) }),
          policyId: fc.constantFrom(undefined, undefined, 'p0'),
        }),
      },
      { weight: 1, arbitrary: fc.constant({ type: 'reset' as const }) },
    ),
  });
type Op = typeof opArb extends (n: number) => fc.Arbitrary<infer T> ? T : never;

/** The step's arguments as the limiter sends them, with StepArgs.base (and policySeenUs, op.seenUs after startUs, and policyHoldMs). */
function argsOf(base: OverrideLimit[], op: Extract<Op['op'], { type: 'step' }>, lastAtUs: number, policies: (StepArgs['policy'] | undefined)[], startUs = 0): StepArgs {
  const adjust = op.kind === 'adjust' || op.kind === 'refund-since';
  const wait = adjust ? MAX_WAIT_MS : op.kind === 'grant' ? 0 : op.maxWaitMs;
  const limits = base.map((l, i) => {
    const capacity = l.capacityUnits / l.tokenUnits;
    const tokens = op.kind === 'peek' ? 0 : adjust ? op.costs[i]! * (op.refund[i] ? -1 : 1) : Math.min(op.costs[i]!, capacity);
    return { costUnits: tokens * l.tokenUnits, limitUnits: limitOf(l, wait), refillUnitsPerUs: l.refillUnitsPerUs };
  });
  const args: { -readonly [K in keyof StepArgs]: StepArgs[K] } = { limits, base: { tokenUnits: base.map((l) => l.tokenUnits), capacityUnits: base.map((l) => l.capacityUnits), maxWaitMs: wait } };
  if (adjust) args.adjust = true;
  if (op.kind === 'refund-since') args.refundSinceUs = lastAtUs - op.backUs;
  if (op.kind === 'grant') args.tokenUnits = base[0]!.tokenUnits;
  const policy = op.policy === undefined ? undefined : policies[op.policy];
  if (policy) args.policy = policy;
  else if (op.seenUs !== undefined) args.policySeenUs = startUs + op.seenUs;
  if (op.holdMs !== undefined) args.policyHoldMs = op.holdMs;
  return args;
}

/** What a store answers: core's result without its writes (a blocked step takes no tokens). */
function answer(r: StepResult & { write?: unknown; writeRecord?: unknown }): StepResult {
  const { write: _w, writeRecord: _r, ...rest } = r;
  return rest;
}

/** The key's state after core's writes. */
function applyWrites(s: { state?: BucketState; record?: OverrideRecord }, r: { write?: BucketState | null; writeRecord?: OverrideRecord | null }) {
  return { state: r.write === undefined ? s.state : (r.write ?? undefined), record: r.writeRecord === undefined ? s.record : (r.writeRecord ?? undefined) };
}

/**
 * The expiry the scripts set (ms; null: none) for a value written at nowUs: none while a key's own
 * record has numbers without an end; else at least 1 s, the bucket's full time under the expiry split,
 * a key's own record's untilUs, and the block's end. `pinned`: the override script set or cleared numbers
 * with a policy-wide change's id (setPolicyLimits, clearPolicyLimits on the policy's own key), kept as
 * a key's own are (the change, or the marker of its revert). A key's copy of a policy-wide change or a
 * marker, not pinned, is kept at least holdMs (the step's StepArgs.policyHoldMs).
 */
function expiryOf(state: BucketState | undefined, record: OverrideRecord | undefined, base: OverrideLimit[], nowUs: number, pinned: boolean, holdMs = 0): number | null {
  if (!record) return Math.max(1000, ...(state?.debtUnits ?? []).map((d, i) => (d > 0 ? Math.ceil(d / (base[i]!.refillUnitsPerUs * 1000)) : 0)));
  // The policy-wide change itself, or its revert's marker: kept for good, past its end too.
  if (pinned) return null;
  const own = numbersLive(record, nowUs) && (pinned || record.policyId === undefined);
  if (own && record.untilUs === undefined) return null;
  // Numbers with an end (a key's own, or a copy of a policy-wide change), a limit still spent at it:
  // until the key's next step.
  const u0 = record.untilUs;
  const at = numbersAt(record, nowUs, base);
  if (numbersLive(record, nowUs) && u0 !== undefined && state?.debtUnits.some((a, i) => a - (u0 - nowUs) * at[i]!.refillUnitsPerUs > 0)) return null;
  let ms = 0;
  state?.debtUnits.forEach((a, i) => {
    if (a > 0) ms = Math.max(ms, a / (at[i]!.refillUnitsPerUs * 1000));
  });
  if (record.policyId !== undefined && !pinned) ms = Math.max(ms, holdMs);
  if (own) ms = Math.max(ms, (record.untilUs! - nowUs) / 1000);
  if (record.blockedUntilUs !== undefined) ms = Math.max(ms, (record.blockedUntilUs - nowUs) / 1000);
  return Math.max(1000, Math.ceil(ms));
}

async function checkStored(key: string, s: { state?: BucketState; record?: OverrideRecord }, base: OverrideLimit[], nowUs: number, what: object, written: boolean, pinned = false, holdMs = 0) {
  const [stored, pttl] = await Promise.all([io.get(key), io.pttl(key)]);
  expect({ ...what, stored }).toEqual({ ...what, stored: valueText(s.state, s.record) });
  if (!written || stored === null) return;
  const px = expiryOf(s.state, s.record, base, nowUs, pinned, holdMs);
  if (px === null) expect({ ...what, pttl }).toEqual({ ...what, pttl: -1 });
  else {
    expect(pttl).toBeLessThanOrEqual(px);
    expect(pttl).toBeGreaterThan(px - 5000);
  }
}

/** An adapter in the @upstash/redis shape over ioredis: every decision waits the turn, so concurrent ones share one batch. Counts batch calls. */
const calls = { batch: 0 };
const client: RedisScriptClient = {
  evalsha: (sha, keys, args) => {
    if (sha === GCRA_BATCH_SCRIPT_SHA) calls.batch++;
    return io.evalsha(sha, keys.length, ...keys, ...args);
  },
  eval: (script, keys, args) => io.eval(script, keys.length, ...keys, ...args),
  del: (key) => io.del(key),
  ping: () => io.ping(),
};

describe('override records in the scripts against core/override.ts (fake clock, real Redis)', () => {
  it('Redis computes the stored SHA of the override script', async () => {
    expect(await io.script('LOAD', OVERRIDE_SCRIPT)).toBe(OVERRIDE_SCRIPT_SHA);
  });

  for (const n of [1, 2, 3]) {
    it(`single-key script, ${n} limit${n > 1 ? 's' : ''}: every kind of step under records, blocks and policy-wide changes, with override() and reset() between`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(numbersArb, { minLength: n, maxLength: n }),
          fc.array(fc.record({ limits: fc.array(numbersArb, { minLength: n, maxLength: n }), forMs: fc.option(fc.integer({ min: 1, max: 5000 }), { nil: undefined }), versionUs: fc.option(fc.integer({ min: 0, max: 5_000_000 }), { nil: undefined }) }), { minLength: 2, maxLength: 2 }),
          fc.array(opArb(n), { minLength: 1, maxLength: 40 }),
          async (base, policyArbs, ops) => {
            let nowUs = 1_790_000_000_000_000;
            const store = redisStore({ client: io, clientClock: true, nowMs: () => nowUs / 1000, batch: false });
            const key = `ov${run++}`;
            let s: { state?: BucketState; record?: OverrideRecord } = {};
            let lastAtUs = nowUs;
            // Two policy-wide changes, their end fixed when first seen (as a node's cache holds one), each
            // with a version (µs after the start; none: an id without one), ordered against the
            // overrides' ids (versioned by the store clock) and the steps' policySeenUs.
            const startUs = nowUs;
            const policies = policyArbs.map((p, i) => ({ id: `${p.versionUs === undefined ? '' : `${startUs + p.versionUs}.`}p${i}`, limits: p.limits, ...(p.forMs === undefined ? {} : { untilUs: nowUs + p.forMs * 1000 }) }));
            for (const [i, { dtUs, op }] of ops.entries()) {
              nowUs += dtUs;
              const what = { i, op };
              if (op.type === 'step') {
                const args = argsOf(base, op, lastAtUs, policies, startUs);
                const want = stepWithRecord(s.state, nowUs, args, s.record);
                const got = await store.step(key, args);
                expect({ ...what, got }).toEqual({ ...what, got: answer(want) });
                s = applyWrites(s, want);
                await checkStored(key, s, base, nowUs, what, want.write !== undefined || want.writeRecord !== undefined, false, op.holdMs);
              } else if (op.type === 'override') {
                const args: OverrideArgs = { base, ...(op.limits !== undefined && { limits: op.limits }), ...(op.forMs !== undefined && { forMs: op.forMs }), ...(op.blockForMs !== undefined && { blockForMs: op.blockForMs }), ...(op.policyId !== undefined && { policyId: op.policyId }) };
                const want = applyOverride(s.state, s.record, nowUs, args);
                const got = await store.override!(key, args);
                const { write: _w, writeRecord: _r, ...result } = want;
                expect({ ...what, got }).toEqual({ ...what, got: result });
                s = applyWrites(s, want);
                const pinned = op.limits !== undefined && op.policyId !== undefined;
                await checkStored(key, s, base, nowUs, what, want.write !== undefined || want.writeRecord !== undefined, pinned);
              } else {
                await store.reset(key);
                s = { record: s.record };
                expect({ ...what, stored: await io.get(key) }).toEqual({ ...what, stored: valueText(undefined, s.record) });
              }
              lastAtUs = nowUs;
            }
          },
        ),
        { numRuns: n === 1 ? 200 : 80 },
      );
    }, 180_000);
  }

  it("single-key and batch script, one limit: a key's own numbers, and a policy-wide change's, with no end (the straight-line path), takes and peeks with reservations, as core decides them", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(numbersArb, { minLength: 3, maxLength: 3 }),
        fc.array(fc.record({ dtUs: gapUsArb(), key: fc.nat({ max: 2 }), cost: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 50 })), maxWaitMs: fc.constantFrom(0, 0, 10, 250, 5000), together: fc.boolean(), wide: fc.oneof({ weight: 3, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }), holdMs: fc.constantFrom(undefined, 0, 20_000) }), { minLength: 1, maxLength: 40 }),
        async ([base, own, other], ops) => {
          let nowUs = 1_790_000_000_000_000;
          const alone = redisStore({ client: io, clientClock: true, nowMs: () => nowUs / 1000, batch: false });
          const batched = redisStore({ client, clientClock: true, nowMs: () => nowUs / 1000, batch: { maxSize: 64 } });
          const keys = [0, 1, 2].map((k) => `ovs${run}:${k}`);
          run++;
          const states: { state?: BucketState; record?: OverrideRecord }[] = [];
          // Keys 0 and 1 have numbers of their own; key 2 none, so a policy-wide change is installed on it
          // (and cleared by a step that does not see it).
          for (const [k, key] of keys.entries()) {
            if (k === 2) {
              await io.del(key);
              states.push({});
              continue;
            }
            const args: OverrideArgs = { base: [base!], limits: [own!] };
            const want = applyOverride(undefined, undefined, nowUs, args);
            await alone.override!(key, args);
            states.push(applyWrites({}, want));
          }
          const change = { id: 'wide', limits: [other!] };
          for (const [i, op] of ops.entries()) {
            nowUs += op.dtUs;
            const plain = argsOf([base!], { type: 'step', kind: op.cost === 0 ? 'peek' : 'take', costs: [op.cost], refund: [false], maxWaitMs: op.maxWaitMs, backUs: 0, policy: undefined, seenUs: undefined, holdMs: op.holdMs }, nowUs, []);
            const args = op.wide ? { ...plain, policy: change } : plain;
            // Alone, or two at once (a batch of two keys, in order).
            const pair = op.together ? [op.key, (op.key + 1) % 3] : [op.key];
            const before = calls.batch;
            const got = await Promise.all(pair.map((k) => (op.together ? batched : alone).step(keys[k]!, args)));
            expect(calls.batch - before).toBe(op.together ? 1 : 0);
            for (const [j, k] of pair.entries()) {
              const want = stepWithRecord(states[k]!.state, nowUs, args, states[k]!.record);
              expect({ i, j, got: got[j] }).toEqual({ i, j, got: answer(want) });
              states[k] = applyWrites(states[k]!, want);
              await checkStored(keys[k]!, states[k]!, [base!], nowUs, { i, j }, want.write !== undefined || want.writeRecord !== undefined, false, op.holdMs);
            }
          }
        },
      ),
      { numRuns: 120 },
    );
  }, 180_000);

  it('batch script: concurrent takes and peeks on keys with records, blocks and policy-wide changes, in one call, as core decides them in order', async () => {
    let batched = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(numbersArb, { minLength: 1, maxLength: 3 }), { minLength: 3, maxLength: 3 }),
        fc.array(
          fc.record({
            dtUs: gapUsArb(),
            takes: fc.array(fc.record({ key: fc.nat({ max: 2 }), costs: fc.array(costArb, { minLength: 3, maxLength: 3 }), maxWaitMs: fc.constantFrom(0, 0, 250), policy: fc.constantFrom(undefined, undefined, 0, 1), seenUs: fc.option(fc.integer({ min: 0, max: 3_000_000 }), { nil: undefined }), holdMs: fc.constantFrom(undefined, 0, 20_000) }), { minLength: 2, maxLength: 8 }),
            change: fc.option(fc.record({ key: fc.nat({ max: 2 }), limits: fc.oneof(fc.constant(null), fc.array(numbersArb, { minLength: 3, maxLength: 3 })), forMs: fc.option(fc.integer({ min: 0, max: 3000 }), { nil: undefined }), blockForMs: fc.constantFrom(undefined, undefined, null, 0, 500, 3000) }), { nil: undefined }),
          }),
          { minLength: 1, maxLength: 12 },
        ),
        async (keyBase, rounds) => {
          let nowUs = 1_790_000_000_000_000;
          const store = redisStore({ client, clientClock: true, nowMs: () => nowUs / 1000, batch: { maxSize: 64 } });
          const keys = keyBase.map((_, k) => `ovb${run}:${k}`);
          run++;
          // Versioned ids (µs after the start), ordered against the steps' policySeenUs.
          const startUs = nowUs;
          const policies = [0, 1].map((i) => (b: OverrideLimit[]) => ({ id: `${startUs + 1_000_000 * i}.p${i}`, limits: b.map((l) => ({ ...l, capacityUnits: l.capacityUnits * (i + 2) })) }));
          const states: { state?: BucketState; record?: OverrideRecord }[] = keys.map(() => ({}));
          for (const [r, round] of rounds.entries()) {
            nowUs += round.dtUs;
            const argsList = round.takes.map((t) => {
              const base = keyBase[t.key]!;
              const args = argsOf(base, { type: 'step', kind: 'take', costs: t.costs, refund: [false, false, false], maxWaitMs: t.maxWaitMs, backUs: 0, policy: undefined, seenUs: t.seenUs, holdMs: t.holdMs }, nowUs, [], startUs);
              return t.policy === undefined ? args : { ...args, policy: policies[t.policy]!(base) };
            });
            const before = calls.batch;
            const got = await Promise.all(round.takes.map((t, i) => store.step(keys[t.key]!, argsList[i]!)));
            expect(calls.batch - before).toBe(1);
            batched += round.takes.length;
            round.takes.forEach((t, i) => {
              const want = stepWithRecord(states[t.key]!.state, nowUs, argsList[i]!, states[t.key]!.record);
              expect({ r, i, got: got[i] }).toEqual({ r, i, got: answer(want) });
              states[t.key] = applyWrites(states[t.key]!, want);
            });
            if (round.change) {
              const { key, limits, forMs, blockForMs } = round.change;
              const base = keyBase[key]!;
              const args: OverrideArgs = { base, limits: limits === null ? null : limits.slice(0, base.length), ...(forMs !== undefined && { forMs }), ...(blockForMs !== undefined && { blockForMs }) };
              const want = applyOverride(states[key]!.state, states[key]!.record, nowUs, args);
              await store.override!(keys[key]!, args);
              states[key] = applyWrites(states[key]!, want);
            }
            expect({ r, stored: await io.mget(...keys) }).toEqual({ r, stored: states.map((s) => valueText(s.state, s.record)) });
          }
        },
      ),
      { numRuns: 100 },
    );
    expect(batched).toBeGreaterThan(1000);
  }, 180_000);
});

describe('two limiters on one redis-server (issue 31)', () => {
  it("a per-key change made through limiter A is obeyed by limiter B's next decision: new numbers, carried debt, a block, a clear, a policy-wide change", async () => {
    const [ioA, ioB] = [new IORedis(redis.url), new IORedis(redis.url)];
    try {
      const policies = { api: { capacity: 10, refillPerSecond: 0.001 } };
      const storeA = redisStore({ client: ioA });
      const a = createLimiter({ store: storeA, policies, prefix: 'two:' });
      const b = createLimiter({ store: redisStore({ client: ioB }), policies, prefix: 'two:' });
      const policy = a.policy('api')!;
      const base = baseNumbers(policy);
      const key = 'two:api:customer';
      const takeB = async (n: number) => (await Promise.all(Array.from({ length: n }, () => b.take('api', 'customer')))).filter((d) => d.allowed).length;
      expect(await takeB(4)).toBe(4);
      // Through A: capacity 6. B's next decisions: the 4 spent stay spent, 2 left.
      await storeA.override!(key, { base, limits: [{ ...base[0]!, capacityUnits: 6 * base[0]!.tokenUnits }] });
      expect(await takeB(5)).toBe(2);
      // Up to 20: B gains the headroom at once, its 6 spent kept.
      await storeA.override!(key, { base, limits: [{ ...base[0]!, capacityUnits: 20 * base[0]!.tokenUnits }] });
      expect(await takeB(20)).toBe(14);
      // A block through A: B refused whatever the bucket holds; unblocked, B decides by the bucket again.
      await storeA.override!(key, { base, limits: [{ ...base[0]!, capacityUnits: 30 * base[0]!.tokenUnits }], blockForMs: 60_000 });
      const blocked = await b.take('api', 'customer');
      expect(blocked.allowed).toBe(false);
      await storeA.override!(key, { base, blockForMs: null });
      expect(await takeB(20)).toBe(10);
      // Cleared through A: back to the policy's 10, every one of them spent.
      await storeA.override!(key, { base, limits: null });
      expect(await takeB(3)).toBe(0);
      await a.reset('api', 'customer');
      expect(await takeB(12)).toBe(10);
      // A policy-wide change seen by B alone (its steps carry it): installed on a key with no record of its own.
      const wide = { id: 'incident', limits: [{ ...base[0]!, capacityUnits: 2 * base[0]!.tokenUnits }] };
      const other = 'two:api:other';
      const args = { ...stepArgs(policy, 1, 0, wide) };
      const viaB = redisStore({ client: ioB });
      expect((await Promise.all([0, 1, 2].map(() => viaB.step(other, args)))).map((r) => r.allowed)).toEqual([true, true, false]);
      expect(await ioA.get(other)).toMatch(/\|incident$/);
      // A has read no change (its view, version 0, is no newer than the copy's): its next peek decides
      // under the copy, 2 of 2 spent, and keeps it.
      expect((await a.peek('api', 'other')).remaining).toBe(0);
      expect(await ioA.get(other)).toMatch(/\|incident$/);
      // A change and its revert through A (a newer view; a revert with no change in force writes
      // nothing): A's next peek takes the copy away, carries the 2 spent back to the base and leaves the
      // marker of A's reading.
      await a.setPolicyLimits('api', { capacity: 2, refillPerSecond: 1 });
      await a.clearPolicyLimits('api');
      expect((await a.peek('api', 'other')).remaining).toBe(8);
      expect(await ioA.get(other)).toMatch(/\|\|\|\|\d{16}\.$/);
    } finally {
      ioA.disconnect();
      ioB.disconnect();
    }
  });
});

describe('settlements under override records (issue 31 with issue 32)', () => {
  it('a settlement after the numbers changed settles in the units the charge was taken in, as the memory store does', async () => {
    // Two charges (3 and 2 tokens) taken under one plan; one settled at 2 (1 back) under another, the
    // other at 1 (1 back) under none: the same answers as the memory store, alone and batched.
    let now = 1_790_000_000_000;
    const policy = resolvePolicy('p', { capacity: 10, refillPerSecond: 1 }, { onStoreError: 'deny', timeoutMs: 1000 });
    const base = baseNumbers(policy);
    const plan = [numbersOf(5, { p: 1, q: 2 })];
    const other = [numbersOf(8, { p: 1, q: 3 })];
    const run = async (store: Store, key: string) => {
      const out: StepResult[] = [];
      const take = (id: string, cost: number) => store.step(key, { ...stepArgs(policy, cost, 0), op: { id, ttlMs: 60_000, fingerprint: `take|${cost}` } });
      const settle = (id: string, cost: number) => store.step(key, { ...settleArgs(policy, cost, id), op: { id: SETTLE_OP + id, ttlMs: 60_000, fingerprint: `settle|${cost}` } });
      await store.override!(key, { base, limits: plan });
      now += 100;
      out.push(await take('c1', 3), await take('c2', 2));
      now += 250;
      await store.override!(key, { base, limits: other });
      now += 300;
      out.push(await settle('c1', 2), await store.step(key, stepArgs(policy, 0, 0)));
      await store.override!(key, { base, limits: null });
      now += 50;
      out.push(await settle('c2', 1), await store.step(key, stepArgs(policy, 0, 0)));
      return out.map((r) => ({ allowed: r.allowed, debtUnits: r.debtUnits, limits: r.limits }));
    };
    const t = now;
    const want = await run(memoryStore({ nowMs: () => now }), 'k');
    expect(want.map((r) => r.allowed)).toEqual([true, true, true, true, true, true]);
    for (const batch of [false, { maxSize: 64 }] as const) {
      now = t;
      const key = `settle${run}:${batch ? 'batched' : 'alone'}`;
      expect(await run(redisStore({ client: io, clientClock: true, nowMs: () => now, batch }), key)).toEqual(want);
    }
  });
});

describe('policy-wide changes are ordered in the Redis scripts (41ade5e: versions, views, markers)', () => {
  // One limit of 10 tokens refilling so slowly that the fake clock's steps refill nothing; the changes
  // keep its token and refill units, so a debt carries between them unchanged.
  const policy = resolvePolicy('p', { capacity: 10, refillPerSecond: 0.001 }, { onStoreError: 'deny', timeoutMs: 1000 });
  const base = baseNumbers(policy);
  const T0 = 1_790_000_000_000_000;
  const changeOf = (versionUs: number, name: string, capacity: number) => ({ id: `${versionUs}.${name}#`, limits: [{ ...base[0]!, capacityUnits: capacity * base[0]!.tokenUnits }] });
  const v1 = changeOf(T0 - 10_000_000, 'one', 20);
  const v2 = changeOf(T0 - 5_000_000, 'two', 4);
  const take = (cost: number, view: { change?: typeof v1; seenUs?: number } = {}) => ({ ...stepArgs(policy, cost, 0, view.change), ...(view.seenUs === undefined ? {} : { policySeenUs: view.seenUs }) });
  const copyOf = (c: typeof v1) => `|${c.limits[0]!.tokenUnits},${c.limits[0]!.capacityUnits},${c.limits[0]!.refillUnitsPerUs}|||${c.id}`;
  const debtOf = (tokens: number) => tokens * base[0]!.tokenUnits;

  /** A store on the fake clock at T0, and its step: alone (single-key script) or in a batch call with a peek of another key. */
  function storeOf(batch: boolean) {
    const clock = { nowUs: T0 };
    const store = redisStore({ client, clientClock: true, nowMs: () => clock.nowUs / 1000, batch: batch ? { maxSize: 64 } : false });
    const step = async (key: string, args: StepArgs) => {
      if (!batch) return store.step(key, args);
      const before = calls.batch;
      const [r] = await Promise.all([store.step(key, args), store.step(`${key}:beside`, take(0))]);
      expect(calls.batch - before).toBe(1);
      return r;
    };
    return { store, step, clock };
  }

  for (const batch of [false, true]) {
    const script = batch ? 'batch script' : 'single-key script';

    it(`${script}: a key holding a copy of a newer change is decided under it by a step with an older view (an older change, or none seen before it), and keeps it`, async () => {
      const { step } = storeOf(batch);
      const key = `ord-a${run++}`;
      // Under v2 (capacity 4): 4 taken, the bucket empty.
      expect((await step(key, take(4, { change: v2 }))).allowed).toBe(true);
      expect(await io.get(key)).toBe(`${debtOf(4)}:${T0}${copyOf(v2)}`);
      // A node that still sees v1 (capacity 20) is refused under v2; v2's copy stays.
      const older = await step(key, take(1, { change: v1 }));
      expect({ allowed: older.allowed, limits: older.limits }).toEqual({ allowed: false, limits: v2.limits });
      // A node that read no change before v2 was made (policySeenUs below its version): the same.
      const none = await step(key, take(1, { seenUs: T0 - 6_000_000 }));
      expect({ allowed: none.allowed, limits: none.limits }).toEqual({ allowed: false, limits: v2.limits });
      expect(await io.get(key)).toBe(`${debtOf(4)}:${T0}${copyOf(v2)}`);
    });

    it(`${script}: a step that read no change after a copy's version leaves the marker "<seenUs>." and carries the bucket to the base; an older view does not install its change again; a newer change replaces the marker`, async () => {
      const { step } = storeOf(batch);
      const key = `ord-b${run++}`;
      // Under v1 (capacity 20): 6 taken.
      expect((await step(key, take(6, { change: v1 }))).allowed).toBe(true);
      expect(await io.get(key)).toBe(`${debtOf(6)}:${T0}${copyOf(v1)}`);
      // No change, read after v1 was made: under the base (10), 6 spent, 4 left; the marker in the copy's place.
      const seenUs = T0 - 1_000_000;
      const after = await step(key, take(4, { seenUs }));
      expect({ allowed: after.allowed, limits: after.limits, debt: after.debtUnits }).toEqual({ allowed: true, limits: undefined, debt: [debtOf(10)] });
      expect(await io.get(key)).toBe(`${debtOf(10)}:${T0}||||${seenUs}.`);
      // A node that still sees v1 (capacity 20, 10 spent) would be admitted; it is decided under the base instead.
      const stale = await step(key, take(1, { change: v1 }));
      expect({ allowed: stale.allowed, limits: stale.limits }).toEqual({ allowed: false, limits: undefined });
      expect(await io.get(key)).toBe(`${debtOf(10)}:${T0}||||${seenUs}.`);
      // A change made after the marker's reading replaces it, carrying the 10 spent.
      const v3 = changeOf(seenUs + 1, 'three', 12);
      const newer = await step(key, take(2, { change: v3 }));
      expect({ allowed: newer.allowed, limits: newer.limits }).toEqual({ allowed: true, limits: v3.limits });
      expect(await io.get(key)).toBe(`${debtOf(12)}:${T0}${copyOf(v3)}`);
    });
  }

  for (const batch of [false, true]) {
    const script = batch ? 'batch script' : 'single-key script';

    it(`${script}: a step with no view (no change, no policySeenUs) on a key holding a copy keeps the copy and decides under it (0065881: no view is the oldest)`, async () => {
      const { step } = storeOf(batch);
      const key = `rv-a${run++}`;
      expect((await step(key, take(4, { change: v2 }))).allowed).toBe(true);
      // Under v2 (capacity 4) the key is empty; under the base (10) it would admit 6 more.
      const none = await step(key, take(1));
      expect({ allowed: none.allowed, limits: none.limits }).toEqual({ allowed: false, limits: v2.limits });
      expect(await io.get(key)).toBe(`${debtOf(4)}:${T0}${copyOf(v2)}`);
    });

    it(`${script}: a copy of a change that ends becomes the marker of that change (its id kept), and a step with an older change's view then decides under the base and does not install its change`, async () => {
      const { step, clock } = storeOf(batch);
      const key = `rv-b${run++}`;
      const ends = { ...changeOf(T0 - 5_000_000, 'ends', 4), untilUs: T0 + 1_000_000 };
      expect((await step(key, take(4, { change: ends }))).allowed).toBe(true);
      const l = ends.limits[0]!;
      expect(await io.get(key)).toBe(`${debtOf(4)}:${T0}|${l.tokenUnits},${l.capacityUnits},${l.refillUnitsPerUs}|${T0 + 1_000_000}||${ends.id}`);
      clock.nowUs = T0 + 2_000_000;
      // The 4 spent, less 2 s of refill (one unit a µs), carried to the base.
      const spent = debtOf(4) - 2_000_000;
      // A peek with no view after the end: the copy is now the marker of its change.
      const peek = await step(key, take(0));
      expect({ allowed: peek.allowed, limits: peek.limits, debt: peek.debtUnits }).toEqual({ allowed: true, limits: undefined, debt: [spent] });
      expect(await io.get(key)).toBe(`${spent}:${T0 + 2_000_000}||||${ends.id}`);
      // A node that still sees v1 (made before it, capacity 20): decided under the base (10, 4 spent), the marker kept.
      const stale = await step(key, take(1, { change: v1 }));
      expect({ allowed: stale.allowed, limits: stale.limits, debt: stale.debtUnits }).toEqual({ allowed: true, limits: undefined, debt: [spent + debtOf(1)] });
      expect(await io.get(key)).toBe(`${spent + debtOf(1)}:${T0 + 2_000_000}||||${ends.id}`);
      // Up to 10: 5 more are refused as one, under the base.
      const over = await step(key, take(6, { change: v1 }));
      expect({ allowed: over.allowed, limits: over.limits }).toEqual({ allowed: false, limits: undefined });
    });

    it(`${script}: a key's clear (limits null, no policyId) leaves a copy or a marker the key holds, and the key's next step is decided under it`, async () => {
      const { store, step } = storeOf(batch);
      const [key, marked] = [`rv-c${run}`, `rv-c${run}:m`];
      run++;
      expect((await step(key, take(4, { change: v2 }))).allowed).toBe(true);
      const cleared = await store.override!(key, { base, limits: null });
      expect({ before: cleared.before, after: cleared.after }).toEqual({ before: { limits: v2.limits, policyId: v2.id }, after: { limits: v2.limits, policyId: v2.id } });
      expect(await io.get(key)).toBe(`${debtOf(4)}:${T0}${copyOf(v2)}`);
      const next = await step(key, take(1, { change: v2 }));
      expect({ allowed: next.allowed, limits: next.limits }).toEqual({ allowed: false, limits: v2.limits });
      // A marker (a view newer than v1's copy) stays too, and an older view still does not install v1.
      await step(marked, take(6, { change: v1 }));
      await step(marked, take(0, { seenUs: T0 - 1_000_000 }));
      expect(await io.get(marked)).toBe(`${debtOf(6)}:${T0}||||${T0 - 1_000_000}.`);
      expect((await store.override!(marked, { base, limits: null })).after).toEqual({ policyId: `${T0 - 1_000_000}.` });
      expect(await io.get(marked)).toBe(`${debtOf(6)}:${T0}||||${T0 - 1_000_000}.`);
      const stale = await step(marked, take(5, { change: v1 }));
      expect({ allowed: stale.allowed, limits: stale.limits }).toEqual({ allowed: false, limits: undefined });
    });

    it(`${script}: a step that leaves a copy or a marker holds the key policyHoldMs even with its bucket full (or full within 1 ms); a plain key's and a key's own expiry are as without it`, async () => {
      const { store, step } = storeOf(batch);
      // 1000 tokens a second: one token is back in 1 ms, so the bucket's own expiry is the 1 s floor.
      const fast = resolvePolicy('f', { capacity: 10, refillPerSecond: 1000 }, { onStoreError: 'deny', timeoutMs: 1000 });
      const fb = baseNumbers(fast);
      const wide = { id: `${T0 - 5_000_000}.wide#`, limits: [{ ...fb[0]!, capacityUnits: 20 * fb[0]!.tokenUnits }] };
      const hold = 5000;
      const takeFast = (cost: number, view: { change?: typeof wide; seenUs?: number } = {}): StepArgs => ({
        ...stepArgs(fast, cost, 0, view.change),
        ...(view.seenUs === undefined ? {} : { policySeenUs: view.seenUs }),
        policyHoldMs: hold,
      });
      const k = (name: string) => `rv-d${run}:${name}`;
      run++;
      const pttl = async (key: string) => {
        const [value, ms] = await Promise.all([io.get(key), io.pttl(key)]);
        return { value: value?.replace(/^\d+:\d+/, '<bucket>'), ms };
      };
      const copy = `|${fb[0]!.tokenUnits},${wide.limits[0]!.capacityUnits},${fb[0]!.refillUnitsPerUs}|||${wide.id}`;
      // A peek that installs the copy on a key with no bucket: nothing but the copy, held 5 s.
      await step(k('copy'), takeFast(0, { change: wide }));
      const installed = await pttl(k('copy'));
      expect(installed.value).toBe(copy);
      expect(installed.ms).toBeGreaterThan(hold - 1000);
      // A take on the key holding that copy (the straight-line path of a copy with no end): held 5 s again.
      await io.pexpire(k('copy'), 500);
      expect((await step(k('copy'), takeFast(1, { change: wide }))).allowed).toBe(true);
      const taken = await pttl(k('copy'));
      expect(taken.value).toBe(`<bucket>${copy}`);
      expect(taken.ms).toBeGreaterThan(hold - 1000);
      // A step whose view is newer leaves the marker: held 5 s with the bucket refilled in 1 ms.
      expect((await step(k('copy'), takeFast(1, { seenUs: T0 }))).allowed).toBe(true);
      const marked = await pttl(k('copy'));
      expect(marked.value).toBe(`<bucket>||||${T0}.`);
      expect(marked.ms).toBeGreaterThan(hold - 1000);
      // A plain key, with no view and with one: the bucket's own expiry (the 1 s floor).
      for (const view of [{}, { seenUs: T0 }]) {
        expect((await step(k('plain'), takeFast(1, view))).allowed).toBe(true);
        const plain = await pttl(k('plain'));
        expect(plain.value).toBe('<bucket>');
        expect(plain.ms).toBeLessThanOrEqual(1000);
      }
      // A key's own numbers with no end: no expiry, as without a hold.
      await store.override!(k('own'), { base: fb, limits: wide.limits });
      expect((await step(k('own'), takeFast(1, { seenUs: T0 }))).allowed).toBe(true);
      expect(await io.pttl(k('own'))).toBe(-1);
    });
  }

  it('batch script: steps sharing one base object with different policySeenUs are each decided with their own (one entry each)', async () => {
    const { store } = storeOf(true);
    const [k1, k2] = [`ord-e${run}:1`, `ord-e${run}:2`];
    run++;
    for (const k of [k1, k2]) await storeOf(false).step(k, take(6, { change: v1 }));
    const shared = take(0);
    const before = calls.batch;
    await Promise.all([store.step(k1, { ...shared, policySeenUs: T0 - 20_000_000 }), store.step(k2, { ...shared, policySeenUs: T0 - 1_000_000 })]);
    expect(calls.batch - before).toBe(1);
    // k1's view is older than v1: its copy stays. k2's is newer: the marker of its reading.
    expect(await io.mget(k1, k2)).toEqual([`${debtOf(6)}:${T0}${copyOf(v1)}`, `${debtOf(6)}:${T0}||||${T0 - 1_000_000}.`]);
  });

  it('the override script versions a change by the store clock, increasing even within one µs, and a clear with a policyId leaves a pinned marker of its revert', async () => {
    const store = redisStore({ client: io, clientClock: true, nowMs: () => T0 / 1000, batch: false });
    const key = `ord-c${run++}*`;
    const limits = v1.limits;
    const first = await store.override!(key, { base, limits, policyId: 'w1#' });
    // (The same numbers again change nothing, and write nothing.)
    expect((await store.override!(key, { base, limits, policyId: 'w1b#' })).after?.policyId).toBe(first.after?.policyId);
    const second = await store.override!(key, { base, limits: v1.limits.map((l) => ({ ...l, capacityUnits: l.capacityUnits + 1 })), policyId: 'w2#' });
    // Each id says the version it replaced and since when the policy's numbers were in force up to it
    // (core/override.ts priorOf): none; a change in force (its own version); a revert (the revert's).
    expect([first.after?.policyId, second.after?.policyId]).toEqual([`${T0}.0.0.w1#`, `${T0 + 1}.${T0}.${T0 + 1}.w2#`]);
    expect(await io.pttl(key)).toBe(-1);
    const cleared = await store.override!(key, { base, limits: null, policyId: 'w3#' });
    expect(cleared.after).toEqual({ policyId: `${T0 + 2}.${T0 + 1}.${T0 + 2}.w3#` });
    expect([await io.get(key), await io.pttl(key)]).toEqual([`||||${T0 + 2}.${T0 + 1}.${T0 + 2}.w3#`, -1]);
    // A clear of nothing in force writes nothing.
    expect((await store.override!(key, { base, limits: null, policyId: 'w3b#' })).after?.policyId).toBe(`${T0 + 2}.${T0 + 1}.${T0 + 2}.w3#`);
    const again = await store.override!(key, { base, limits, policyId: 'w4#' });
    expect(again.after?.policyId).toBe(`${T0 + 3}.${T0 + 2}.${T0 + 2}.w4#`);
    await store.override!(key, { base, limits: null, policyId: 'w5#' });
    // Through a limiter on the server's clock: set, then cleared; the policy's record is the marker, kept.
    const limiter = createLimiter({ store: redisStore({ client: io }), policies: { api: { capacity: 10, refillPerSecond: 1 } }, prefix: `ord-c${run++}:` });
    await limiter.setPolicyLimits('api', { capacity: 3, refillPerSecond: 1 });
    await limiter.clearPolicyLimits('api');
    const policyKey = `ord-c${run - 1}:api*`;
    expect(await io.get(policyKey)).toMatch(/^\|\|\|\|\d{16}\.[^|]*$/);
    expect(await io.pttl(policyKey)).toBe(-1);
  });

  for (const batch of [false, true]) {
    it(`two limiters on Redis that disagree about a policy-wide change, neither set the stricter (${batch ? 'batch script: each take beside a peek' : 'single-key script'}): the key moves once; 100 in 500 ms under the change, at most 2 + 50 under its revert`, async () => {
      // The policy: 2 at 100 per second; the change: 100 at one an hour. Taken in turn through a node
      // that has read the change (or its revert) and one that has not, the key used to flip between the
      // two at every step, carrying the debt each time (up to the larger capacity plus the faster rate).
      let nowUs = T0;
      let monoMs = 0;
      const prefix = `ord-n${run++}:`;
      const nodeOf = () =>
        createLimiter({
          store: redisStore({ client: batch ? client : io, clientClock: true, nowMs: () => nowUs / 1000, batch: batch ? { maxSize: 64 } : false }),
          policies: { fast: { capacity: 2, refillPerSecond: 100 } },
          prefix,
          policyRefreshMs: 10_000,
          monotonicMs: () => monoMs,
        });
      const take = async (node: ReturnType<typeof nodeOf>, key: string) => {
        if (!batch) return node.take('fast', key);
        const before = calls.batch;
        const [d] = await Promise.all([node.take('fast', key), node.peek('fast', `${key}:beside`)]);
        expect(calls.batch - before).toBe(1);
        return d;
      };
      const alternate = async (a: ReturnType<typeof nodeOf>, b: ReturnType<typeof nodeOf>, key: string) => {
        const limits = { a: new Set<number>(), b: new Set<number>() };
        let allowed = 0;
        for (let i = 0; i < 500; i++) {
          nowUs += 1000;
          monoMs += 1;
          const d = await take(i % 2 === 0 ? a : b, key);
          limits[i % 2 === 0 ? 'a' : 'b'].add(d.limit);
          if (d.allowed) allowed++;
        }
        return { allowed, limits };
      };
      // A change read by a alone: b decides under the key's copy of it.
      const [a, b] = [nodeOf(), nodeOf()];
      await take(a, 'warm');
      await take(b, 'warm');
      await a.setPolicyLimits('fast', { capacity: 100, refillPerSecond: 1 / 3600 });
      expect(await alternate(a, b, 'changed')).toEqual({ allowed: 100, limits: { a: new Set([100]), b: new Set([100]) } });
      // Its revert read by a alone (b read the change): the marker a leaves stops b installing it again.
      const [c, d] = [nodeOf(), nodeOf()];
      expect((await take(d, 'reverted')).limit).toBe(100);
      nowUs += 1000;
      await c.clearPolicyLimits('fast');
      const reverted = await alternate(c, d, 'reverted');
      expect(reverted.limits).toEqual({ a: new Set([2]), b: new Set([2]) });
      // 2 at once (1 was taken under the change, carried as 1 of the 2), then one each 10 ms.
      expect(reverted.allowed).toBeLessThanOrEqual(2 + 50);
      expect(reverted.allowed).toBeGreaterThanOrEqual(50);
      expect(await io.get(`${prefix}fast:reverted`)).toMatch(/\|\|\|\|\d{16}\.$/);
    });
  }

  it('"!<seenUs>|<holdMs>" on a key with no record keeps the straight-line take (which reads no base); on a key holding a copy the general step reads it', async () => {
    // A base with a number of 2^53 or more is refused only where it is read: by the general step.
    const huge = '0,9007199254740993,10';
    // (Written at seenUs: a bucket read before it is stepped by the general step, which counts its refill from then.)
    const HELD = `5:${T0}`;
    const COPY = `${HELD}|1,20,1|||5.x#`;
    await io.set('ord-d:plain', HELD);
    await io.set('ord-d:copy', COPY);
    await io.set('ord-d:older', `5:${T0 - 1}`);
    const single = (key: string) => io.eval(GCRA_SCRIPT, 1, key, '', 't', '', huge, `!${T0}|5000`, '1', '10', '1').then((r) => (r as unknown[]).slice(2), (e: Error) => e.message);
    expect(await single('ord-d:plain')).toEqual([-1, 2, 5, T0]);
    expect(await single('ord-d:copy')).toMatch(/ARGV\[4\] malformed/);
    expect(await single('ord-d:older')).toMatch(/ARGV\[4\] malformed/);
    // Batched: entry 1 is that base and "!<seenUs>|<holdMs>"; the plain key is decided (1), the copy's refused alone (-2).
    await io.set('ord-d:plain', HELD);
    const reply = (await io.eval(GCRA_BATCH_SCRIPT, 2, 'ord-d:plain', 'ord-d:copy', '', '17', '1', '10', '1', '17', '1', '10', '1', huge, `!${T0}|5000`)) as unknown[];
    expect(reply.slice(1)).toEqual([1, 2, 5, T0, -2, -1, COPY]);
    expect(await io.mget('ord-d:plain', 'ord-d:copy')).toEqual([expect.stringMatching(/^1:\d+$/), COPY]);
  });
});
