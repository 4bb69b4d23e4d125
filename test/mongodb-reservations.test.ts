// MongoDB store: reservations granted before a change of a key's numbers keep their times (e4f3997 in
// core), through the store's own pipelines evaluated by mingo, $$NOW on a fake clock. A document holds
// reservedUntilUs while a reservation is pending; a change (Store.override, a policy-wide change a step
// installs, a record's end) carries the bucket as it will stand when the last one is due, so no take
// under the new numbers comes before or on top of them; a take's cost above a key's capacity in force is
// refused even with a wait. The window property of test/reservations-change.test.ts, against this store.
// A reservation on several limits is counted on each limit when it is due (test/reservations-several.test.ts).
import fc from 'fast-check';
import { BSON } from 'mongodb';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { adjustArgs, CALLER_LAG_US, stepArgs, toDecision } from '../src/core/gcra.js';
import { baseNumbers, policyUnder } from '../src/core/override.js';
import { resolvePolicy, type ResolvedPolicy } from '../src/core/policy.js';
import type { OverrideLimit, PolicyOverride, StepArgs, Store } from '../src/store.js';
import { memoryStore } from '../src/stores/memory.js';
import { mongoStore } from '../src/stores/mongodb.js';
import { rateArb } from './support/exact-bucket.js';
import { MingoCollection } from './support/mingo-collection.js';
import { dueAfterUs, overWindow, segmentAt, type Admission } from './support/windows.js';

const T0 = 1_790_000_000_000;
let now = T0;
let clock: { mockRestore(): void } | undefined;
beforeEach(() => {
  now = T0;
  clock = vi.spyOn(Date, 'now').mockImplementation(() => now);
});
afterEach(() => clock?.mockRestore());

const policyOf = (capacity: number, refillPerSecond: number): ResolvedPolicy => resolvePolicy('r', { capacity, refillPerSecond }, { onStoreError: 'deny', timeoutMs: 1000 });

/** The MongoDB store over mingo beside the memory store (core) on the same clock, each step sent to both. */
function pair() {
  const collection = new MingoCollection();
  const mongo = mongoStore({ collection });
  const memory = memoryStore({ nowMs: () => now });
  const doc = (key = 'k') => collection.docs.find((d) => d._id === key);
  const bytes = (key = 'k') => Buffer.from(BSON.serialize(doc(key)!)).toString('hex');
  const both = async <T>(f: (s: Store) => Promise<T>): Promise<T> => {
    const [got, want] = await Promise.all([f(mongo), f(memory)]);
    // (The memory store's answer is core's, with what it wrote.)
    const { write: _w, writeRecord: _r, ...answer } = want as T & { write?: unknown; writeRecord?: unknown };
    expect(got).toEqual(answer);
    return got;
  };
  return { mongo, memory, doc, bytes, step: (args: StepArgs, key = 'k') => both((s) => s.step(key, args)), override: (args: Parameters<NonNullable<Store['override']>>[1]) => both((s) => s.override!('k', args)) };
}

/**
 * Takes of one token with no wait, every 50 ms from now until `untilMs` after T0: the first admitted,
 * in ms after T0 (Infinity: none).
 */
async function firstAdmittedMs(step: (args: StepArgs) => Promise<{ allowed: boolean }>, args: () => StepArgs, untilMs: number): Promise<number> {
  for (; now <= T0 + untilMs; now += 50) if ((await step(args())).allowed) return now - T0;
  return Infinity;
}

describe('mongodb store: a reservation pending through a change of numbers (mingo, $$NOW on a fake clock)', () => {
  const slow = policyOf(1, 1);
  const fast: OverrideLimit[] = baseNumbers(policyOf(1, 10));

  /** One token spent and two reserved on a key of 1 token at 1/s: due 1 s and 2 s from T0. */
  async function reserveTwo(p: ReturnType<typeof pair>, args: (wait: number) => StepArgs) {
    expect(await p.step(args(0))).toMatchObject({ allowed: true });
    expect(await p.step(args(5000))).toMatchObject({ allowed: true });
    expect(await p.step(args(5000))).toMatchObject({ allowed: true });
    // The document holds when the last one is due, in whole µs of the server clock.
    expect(p.doc()!.reservedUntilUs).toBe((T0 + 2000) * 1000);
  }

  it('changed to 10 a second by Store.override 1 ms later: no take is admitted before the reservations are due (at 10/s all three tokens were refilled in 0.3 s)', async () => {
    const p = pair();
    await reserveTwo(p, (wait) => stepArgs(slow, 1, wait));
    now += 1;
    await p.override({ base: baseNumbers(slow), limits: fast });
    // Carried as the bucket stands when the last is due (its token), plus the new refill until then.
    expect(p.doc()!.reservedUntilUs).toBe((T0 + 2000) * 1000);
    const first = await firstAdmittedMs(p.step, () => stepArgs(slow, 1, 0), 4000);
    expect(first).toBeGreaterThanOrEqual(2000);
    expect(first).toBeLessThanOrEqual(2150);
  });

  it('a policy-wide change to 10 a second that the next steps install: no take is admitted before the reservations are due', async () => {
    const p = pair();
    await reserveTwo(p, (wait) => stepArgs(slow, 1, wait));
    now += 1;
    const change: PolicyOverride = { id: `${now * 1000}.fast`, limits: fast };
    const first = await firstAdmittedMs(p.step, () => stepArgs(slow, 1, 0, change, undefined, 1000), 4000);
    expect(p.doc()!.ov).toMatchObject({ policyId: change.id });
    expect(first).toBeGreaterThanOrEqual(2000);
    expect(first).toBeLessThanOrEqual(2150);
  });

  it('reserved under a key\'s own 1/s for 500 ms, the policy\'s 10/s after: no take is admitted before the reservations are due (the carry at the end)', async () => {
    const p = pair();
    const base = policyOf(1, 10);
    await p.override({ base: baseNumbers(base), limits: baseNumbers(slow), forMs: 500 });
    await reserveTwo(p, (wait) => stepArgs(base, 1, wait));
    // Still spent at the record's end: kept until the key's next step (core keepUntilUs), so not before
    // the reservations are due.
    expect(p.doc()!.expiresAt).toBeUndefined();
    now += 600;
    const first = await firstAdmittedMs(p.step, () => stepArgs(base, 1, 0), 4000);
    expect(first).toBeGreaterThanOrEqual(2000);
    expect(first).toBeLessThanOrEqual(2150);
  });

  it('a take with no wait writes no reservedUntilUs, nor one with a wait it does not need; a write after the reservation is due drops it', async () => {
    const p = pair();
    const policy = policyOf(3, 1);
    await p.step(stepArgs(policy, 1, 0));
    await p.step(stepArgs(policy, 1, 5000));
    expect(Object.keys(p.doc()!).sort()).toEqual(['_id', 'atUs', 'debt', 'expiresAt', 'last']);
    // 2 spent of 3, 2 more: 1 over, due in 1 s.
    await p.step(stepArgs(policy, 2, 5000));
    expect(p.doc()!.reservedUntilUs).toBe((T0 + 1000) * 1000);
    // A take with no wait while it is pending keeps it; a refused one changes no byte.
    now += 999;
    const before = p.bytes();
    expect(await p.step(stepArgs(policy, 1, 0))).toMatchObject({ allowed: false });
    expect(p.bytes()).toBe(before);
    now += 1;
    await p.step(stepArgs(policy, 0, 0));
    expect(p.doc()!.reservedUntilUs).toBe((T0 + 1000) * 1000);
    now += 1000;
    expect(await p.step(stepArgs(policy, 1, 0))).toMatchObject({ allowed: true });
    expect(p.doc()!.reservedUntilUs).toBeUndefined();
  });

  it('a take of more than a key\'s own capacity is refused even with a wait (it would come as one burst), and writes nothing', async () => {
    const p = pair();
    const policy = policyOf(10, 1);
    await p.override({ base: baseNumbers(policy), limits: baseNumbers(policyOf(2, 1)) });
    const before = p.bytes();
    expect(await p.step(stepArgs(policy, 3, 60_000))).toMatchObject({ allowed: false });
    expect(p.bytes()).toBe(before);
    // Within it, a wait is granted as before: 2 now, 1 more due in 1 s.
    expect(await p.step(stepArgs(policy, 2, 60_000))).toMatchObject({ allowed: true });
    expect(await p.step(stepArgs(policy, 1, 60_000))).toMatchObject({ allowed: true });
    expect(p.doc()!.reservedUntilUs).toBe((T0 + 1000) * 1000);
    // And under a policy-wide change of a lower capacity, which the step installs.
    const change: PolicyOverride = { id: `${now * 1000}.low`, limits: baseNumbers(policyOf(2, 1)) };
    expect(await p.step(stepArgs(policy, 3, 60_000, change), 'j')).toMatchObject({ allowed: false });
    expect(await p.step(stepArgs(policy, 2, 60_000, change), 'j')).toMatchObject({ allowed: true });
  });
});

// The window property of test/reservations-change.test.ts (see there), against the MongoDB pipelines:
// whole ms between steps ($$NOW's resolution), fewer runs.
const spec = fc.record({ capacity: fc.integer({ min: 1, max: 12 }), rate: rateArb });
const gapMs = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 20 }), fc.integer({ min: 0, max: 2000 }));
const take = fc.record({ dtMs: gapMs, cost: fc.integer({ min: 1, max: 3 }), maxWaitMs: fc.constantFrom(0, 0, 1, 5, 20, 250, 5000) });
const caseArb = fc.record({
  base: spec,
  phases: fc.array(fc.record({ numbers: spec, forMs: fc.option(fc.integer({ min: 1, max: 3000 }), { nil: undefined }), takes: fc.array(take, { maxLength: 12 }) }), { minLength: 1, maxLength: 3 }),
  first: fc.array(take, { minLength: 1, maxLength: 12 }),
});
const policyOfSpec = (s: { capacity: number; rate: { p: number; q: number } }) => policyOf(s.capacity, s.rate.p / s.rate.q);

describe('mongodb store: a change in the ms between a reservation\'s slot and its caller (mingo, $$NOW on a fake clock)', () => {
  it("counts nothing of the old rate's refill since the slot to the caller's token (review 3, F6)", async () => {
    const store = mongoStore({ collection: new MingoCollection() });
    const third = policyOf(1, 3);
    const take = async (maxWaitMs = 0) => (await store.step('r:f6', stepArgs(third, 1, maxWaitMs))).allowed;
    expect(await take()).toBe(true);
    // Its slot 333.334 ms on, its caller told 334 ms; the key moves to 1 a second then.
    expect(await take(400)).toBe(true);
    now = T0 + 334;
    await store.override!('r:f6', { base: baseNumbers(third), limits: baseNumbers(policyOf(1, 1)) });
    now = T0 + 1333;
    expect(await take()).toBe(false);
    now = T0 + 1336;
    expect(await take()).toBe(true);
  });
});

describe('mongodb store: what such a change does not count (mingo, $$NOW on a fake clock)', () => {
  it('is at most what the reservations of that ms took (review 15, F1)', async () => {
    const store = mongoStore({ collection: new MingoCollection() });
    const fast = policyOf(10, 1_000_000);
    expect((await store.step('r:lag', stepArgs(fast, 10, 0))).allowed).toBe(true);
    expect((await store.step('r:lag', stepArgs(fast, 1, 5))).allowed).toBe(true);
    now = T0 + 1;
    await store.override!('r:lag', { base: baseNumbers(fast), limits: baseNumbers(policyOf(5, 1)) });
    const peek = await store.step('r:lag', stepArgs(fast, 0, 0));
    expect(peek.debtUnits[0]! / baseNumbers(policyOf(5, 1))[0]!.tokenUnits).toBe(11);
  });

  it("a document full again before its reservation's caller comes is kept until then: no expiry before, and a refund keeps it (review 15, F2)", async () => {
    const collection = new MingoCollection();
    const store = mongoStore({ collection });
    const fast = policyOf(10, 1_000_000);
    expect((await store.step('r:gone', stepArgs(fast, 10, 0))).allowed).toBe(true);
    expect((await store.step('r:gone', stepArgs(fast, 1, 5))).allowed).toBe(true);
    // Full 11 µs on, but the TTL monitor may not take it before the caller's ms is over.
    expect((collection.docs[0]!.expiresAt as Date).getTime()).toBe(T0 + 2);
    now = T0 + 1;
    await store.step('r:gone', adjustArgs(fast, -1));
    expect(collection.docs[0]).toMatchObject({ debt: [0], atUs: (T0 + 1) * 1000, reservedUntilUs: T0 * 1000 + 1 });
    await store.override!('r:gone', { base: baseNumbers(fast), limits: baseNumbers(policyOf(5, 1)) });
    const peek = await store.step('r:gone', stepArgs(fast, 0, 0));
    expect(peek.debtUnits[0]! / baseNumbers(policyOf(5, 1))[0]!.tokenUnits).toBe(11);
  });
});

describe('mongodb store: a change of numbers with reservations pending (mingo, $$NOW on a fake clock)', () => {
  it('every window after a change that holds an admission decided under the new numbers holds no more than they allow, reservations granted before counted when due', async () => {
    await fc.assert(
      fc.asyncProperty(caseArb, async ({ base, phases, first }) => {
        now = T0;
        const store = mongoStore({ collection: new MingoCollection() });
        const policy = policyOfSpec(base);
        const key = 'r:k';
        const admitted: Admission[] = [];
        // The same admissions counted when their callers come: the decision's time plus its waitMs.
        const callers: Admission[] = [];
        const segments: { startUs: number; numbers: OverrideLimit }[] = [{ startUs: 0, numbers: baseNumbers(policy)[0]! }];
        const sinceUs = () => (now - T0) * 1000;
        const run = async (takes: { dtMs: number; cost: number; maxWaitMs: number }[]) => {
          for (const t of takes) {
            now += t.dtMs;
            const cost = Math.min(t.cost, base.capacity);
            const r = await store.step(key, stepArgs(policy, cost, t.maxWaitMs));
            if (!r.allowed) continue;
            const under = segmentAt(segments, sinceUs());
            const n = r.limits?.[0] ?? baseNumbers(policy)[0]!;
            expect(n).toEqual(segments[under]!.numbers);
            admitted.push({ dueUs: sinceUs() + dueAfterUs([cost], r.debtUnits, [n]), costs: [cost], under });
            callers.push({ dueUs: sinceUs() + toDecision(r.limits ? policyUnder(policy, r.limits) : policy, cost, r).waitMs * 1000, costs: [cost], under });
          }
        };
        await run(first);
        for (const phase of phases) {
          now += 1;
          const set = baseNumbers(policyOfSpec(phase.numbers))[0]!;
          await store.override!(key, { base: baseNumbers(policy), limits: [set], ...(phase.forMs === undefined ? {} : { forMs: phase.forMs }) });
          while (segments.length > 1 && segments.at(-1)!.startUs > sinceUs()) segments.pop();
          segments.push({ startUs: sinceUs(), numbers: set });
          if (phase.forMs !== undefined) segments.push({ startUs: sinceUs() + phase.forMs * 1000, numbers: baseNumbers(policy)[0]! });
          await run(phase.takes);
        }
        // Windows from each change on (see overWindow): none holds more than those numbers allow.
        expect(overWindow(admitted, segments.map((g) => ({ startUs: g.startUs, numbers: [g.numbers] })))).toBeUndefined();
        // And as the callers see it, each window with the ms a caller may come after its slot (review 3, F6).
        expect(overWindow(callers, segments.map((g) => ({ startUs: g.startUs, numbers: [g.numbers] })), 1, CALLER_LAG_US)).toBeUndefined();
      }),
      { numRuns: Number(process.env.RUNS ?? 120) },
    );
  }, 120_000);
});

describe('mongodb store: a reservation on several limits is charged on each at its due time (mingo, $$NOW on a fake clock)', () => {
  // fast: 10 tokens at 10/s; slow: 1 token at 1/s. A take of 10 fast tokens and 1 slow, reserved behind
  // slow's token, is due in 1 s: fast counts its 10 tokens then, not at once (where it would have
  // refilled them before they come, and admitted 8 more 100 ms before them: 18 in 100 ms, 11 allowed).
  const policy = resolvePolicy('m', { limits: { fast: { capacity: 10, refillPerSecond: 10 }, slow: { capacity: 1, refillPerSecond: 1 } } }, { onStoreError: 'deny', timeoutMs: 1000 });
  const fast = policy.limits[0]!;

  async function check(withRecord: boolean) {
    const p = pair();
    if (withRecord) {
      // A key's own numbers, the policy's: every step below runs the record pipeline.
      await p.override({ base: baseNumbers(policy), limits: baseNumbers(policy) });
      expect(p.doc()!.ov).toBeDefined();
    }
    expect(fast.name).toBe('fast');
    expect(await p.step(stepArgs(policy, [1, 1], 0))).toMatchObject({ allowed: true });
    const op = withRecord ? { op: { id: 'o1', fingerprint: 'f', ttlMs: 60_000 } } : {};
    expect(await p.step({ ...stepArgs(policy, [10, 1], 5000), ...op })).toMatchObject({ allowed: true, debtUnits: [20 * fast.tokenUnits, 2 * policy.limits[1]!.tokenUnits] });
    expect(p.doc()!.reservedUntilUs).toBe((T0 + 1000) * 1000);
    // Fast's stored debt: as a take of 10 at the due time, 1 s of its refill (10 tokens) plus 10.
    expect((p.doc()!.debt as number[])[0]).toBe(20 * fast.tokenUnits);
    // Tokens of the fast limit, in ms after T0 when each comes (the reservation's when it is due).
    const came = [{ atMs: 0, tokens: 1 }, { atMs: 1000, tokens: 10 }];
    // Nothing for 900 ms, then fast-only takes (costs [1, 0], no wait), as many as admitted every 10 ms.
    for (now = T0 + 900; now <= T0 + 2000; now += 10) {
      while ((await p.step(stepArgs(policy, [1, 0], 0))).allowed) came.push({ atMs: now - T0, tokens: 1 });
    }
    // None before the reserved tokens have passed: the first when fast's debt is down to 9 tokens.
    expect(came[2]!.atMs).toBe(1100);
    came.sort((a, b) => a.atMs - b.atMs);
    // Every window holds at most fast's capacity plus its refill over the window.
    for (let i = 0; i < came.length; i++) {
      let tokens = 0;
      for (let j = i; j < came.length; j++) {
        tokens += came[j]!.tokens;
        const allowed = 10 + (10 * (came[j]!.atMs - came[i]!.atMs)) / 1000;
        if (tokens > allowed) expect.fail(`${tokens} fast tokens from ${came[i]!.atMs} to ${came[j]!.atMs} ms, where ${allowed} are allowed`);
      }
    }
  }

  it('the plain pipeline: the fast limit\'s debt is charged to the due time, and fast-only takes are refused until the reserved tokens have passed', () => check(false));
  it('the record pipeline (a key\'s own numbers, and an operation id): the same', () => check(true));
});

describe('mongodb store: reservations on several limits, random (mingo, $$NOW on a fake clock)', () => {
  type Spec = { capacity: number; rate: { p: number; q: number } };
  const spec = fc.record({ capacity: fc.integer({ min: 1, max: 10 }), rate: rateArb });
  const caseArb = fc.integer({ min: 2, max: 3 }).chain((n) => {
    const take = fc.record({ dtMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 400 }), fc.integer({ min: 1, max: 5000 })), costs: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: n, maxLength: n }), maxWaitMs: fc.constantFrom(0, 5, 250, 5000, 5000) });
    return fc.record({
      base: fc.array(spec, { minLength: n, maxLength: n }),
      first: fc.array(take, { minLength: 1, maxLength: 12 }),
      phases: fc.array(fc.record({ numbers: fc.array(fc.option(spec, { nil: undefined }), { minLength: n, maxLength: n }), takes: fc.array(take, { maxLength: 10 }) }), { maxLength: 2 }),
    });
  });
  const policyOfSpecs = (specs: Spec[]): ResolvedPolicy =>
    resolvePolicy('r', { limits: Object.fromEntries(specs.map((s, i) => [`l${i}`, { capacity: s.capacity, refillPerSecond: s.rate.p / s.rate.q }])) }, { onStoreError: 'deny', timeoutMs: 1000 });

  it('each step equal to core\'s (plain, then under a key\'s own numbers), and every window from the start or a change holds no more than each limit allows, reservations counted when due', async () => {
    await fc.assert(
      fc.asyncProperty(caseArb, async ({ base, first, phases }) => {
        now = T0;
        const p = pair();
        const policy = policyOfSpecs(base);
        const own = baseNumbers(policy);
        const admitted: Admission[] = [];
        const callers: Admission[] = [];
        const segments: { startUs: number; numbers: readonly OverrideLimit[] }[] = [{ startUs: 0, numbers: own }];
        const run = async (takes: { dtMs: number; costs: number[]; maxWaitMs: number }[]) => {
          for (const t of takes) {
            now += t.dtMs;
            const costs = t.costs.map((c, i) => Math.min(c, base[i]!.capacity));
            if (!costs.some((c) => c > 0)) costs[0] = 1;
            const r = await p.step(stepArgs(policy, costs, t.maxWaitMs));
            if (!r.allowed) continue;
            const n = r.limits ?? own;
            admitted.push({ dueUs: (now - T0) * 1000 + dueAfterUs(costs, r.debtUnits, n), costs, under: segments.length - 1 });
            callers.push({ dueUs: (now - T0) * 1000 + toDecision(policyUnder(policy, n), costs, r).waitMs * 1000, costs, under: segments.length - 1 });
          }
        };
        await run(first);
        for (const phase of phases) {
          now += 1;
          const set = baseNumbers(policyOfSpecs(phase.numbers.map((s, i) => s ?? base[i]!)));
          await p.override({ base: own, limits: set });
          segments.push({ startUs: (now - T0) * 1000, numbers: set });
          await run(phase.takes);
        }
        // Windows from the start and from each change on, every limit (see overWindow).
        expect(overWindow(admitted, segments, 0)).toBeUndefined();
        expect(overWindow(callers, segments, 0, CALLER_LAG_US)).toBeUndefined();
      }),
      { numRuns: Number(process.env.RUNS ?? 150) },
    );
  }, 120_000);
});
