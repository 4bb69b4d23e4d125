// Reservations granted before a change of a key's numbers keep their times (the caller is already
// sleeping until its slot), so a change must not admit anything on top of them. Each admission is
// counted when it is due (a reservation at its slot, as the caller proceeds then), and every window that
// starts after a change and holds an admission decided under the new numbers must hold no more than
// those numbers allow: capacity plus the refill over the window. Run against the memory store (core's
// stepWithRecord and applyOverride) on a fake clock, with per-key changes of every kind (raised,
// lowered, faster, slower, one limit of several, with an end) between takes that wait.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { adjustArgs, CALLER_LAG_US, stepArgs, toDecision } from '../src/core/gcra.js';
import { baseNumbers, policyUnder } from '../src/core/override.js';
import { resolvePolicy, type ResolvedPolicy } from '../src/core/policy.js';
import type { OverrideLimit } from '../src/store.js';
import { memoryStore } from '../src/stores/memory.js';
import { rateArb } from './support/exact-bucket.js';
import { dueAfterUs, overWindow, segmentAt, type Admission } from './support/windows.js';

const spec = fc.record({ capacity: fc.integer({ min: 1, max: 12 }), rate: rateArb });
const gap = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 400 }), fc.integer({ min: 1, max: 20_000 }), fc.integer({ min: 0, max: 2000 }).map((ms) => ms * 1000));
const take = fc.record({ dtUs: gap, cost: fc.integer({ min: 1, max: 3 }), maxWaitMs: fc.constantFrom(0, 0, 1, 5, 20, 250, 5000) });
const caseArb = fc.record({
  base: spec,
  phases: fc.array(fc.record({ numbers: spec, forMs: fc.option(fc.integer({ min: 1, max: 3000 }), { nil: undefined }), takes: fc.array(take, { maxLength: 12 }) }), { minLength: 1, maxLength: 3 }),
  first: fc.array(take, { minLength: 1, maxLength: 12 }),
});

const policyOf = (s: { capacity: number; rate: { p: number; q: number } }): ResolvedPolicy => resolvePolicy('r', { capacity: s.capacity, refillPerSecond: s.rate.p / s.rate.q }, { onStoreError: 'deny', timeoutMs: 1000 });


describe('a change of numbers with reservations pending (memory store, fake clock)', () => {
  it('every window after a change that holds an admission decided under the new numbers holds no more than they allow, reservations granted before counted when due', async () => {
    await fc.assert(
      fc.asyncProperty(caseArb, async ({ base, phases, first }) => {
        const originUs = 1_790_000_000_000_000;
        let nowUs = originUs;
        const store = memoryStore({ nowMs: () => nowUs / 1000 });
        const policy = policyOf(base);
        const key = 'r:k';
        const admitted: Admission[] = [];
        // The same admissions counted when their callers come: the decision's time plus its waitMs.
        const callers: Admission[] = [];
        // The numbers in force over time: segments in order (a change, or the policy's again at a change's end).
        const segments: { startUs: number; numbers: OverrideLimit }[] = [{ startUs: 0, numbers: baseNumbers(policy)[0]! }];
        const run = async (takes: { dtUs: number; cost: number; maxWaitMs: number }[]) => {
          for (const t of takes) {
            nowUs += t.dtUs;
            const cost = Math.min(t.cost, base.capacity);
            const r = await store.step(key, stepArgs(policy, cost, t.maxWaitMs));
            if (!r.allowed) continue;
            const under = segmentAt(segments, nowUs - originUs);
            const n = r.limits?.[0] ?? baseNumbers(policy)[0]!;
            expect(n).toEqual(segments[under]!.numbers);
            // Relative to the origin: a fraction of a µs is lost at 1.79e15 in a double.
            admitted.push({ dueUs: nowUs - originUs + dueAfterUs([cost], r.debtUnits, [n]), costs: [cost], under });
            callers.push({ dueUs: nowUs - originUs + toDecision(r.limits ? policyUnder(policy, r.limits) : policy, cost, r).waitMs * 1000, costs: [cost], under });
          }
        };
        await run(first);
        for (const phase of phases) {
          nowUs += 1;
          const set = baseNumbers(policyOf(phase.numbers))[0]!;
          await store.override(key, { base: baseNumbers(policy), limits: [set], ...(phase.forMs === undefined ? {} : { forMs: phase.forMs }) });
          // An end not reached yet is replaced by this change.
          while (segments.length > 1 && segments.at(-1)!.startUs > nowUs - originUs) segments.pop();
          segments.push({ startUs: nowUs - originUs, numbers: set });
          if (phase.forMs !== undefined) segments.push({ startUs: nowUs - originUs + phase.forMs * 1000, numbers: baseNumbers(policy)[0]! });
          await run(phase.takes);
        }
        // Windows from each change on (see overWindow): none holds more than those numbers allow.
        expect(overWindow(admitted, segments.map((g) => ({ startUs: g.startUs, numbers: [g.numbers] })))).toBeUndefined();
        // And as the callers see it, each window with the ms a caller may come after its slot (review 3, F6).
        expect(overWindow(callers, segments.map((g) => ({ startUs: g.startUs, numbers: [g.numbers] })), 1, CALLER_LAG_US)).toBeUndefined();
      }),
      { numRuns: Number(process.env.RUNS ?? 400) },
    );
  }, 120_000);

  it("a change in the ms between a reservation's slot and its caller counts nothing of the old rate's refill since the slot to the caller's token (review 3, F6)", async () => {
    let nowUs = 1_790_000_000_000_000;
    const store = memoryStore({ nowMs: () => nowUs / 1000 });
    const third = policyOf({ capacity: 1, rate: { p: 3, q: 1 } });
    const at0 = nowUs;
    const at = (ms: number) => (nowUs = at0 + ms * 1000);
    const take = async (maxWaitMs = 0) => store.step('r:f6', stepArgs(third, 1, maxWaitMs));
    expect((await take()).allowed).toBe(true);
    // Reserved: its slot 333.334 ms on (a token every 333,333.3 µs), its caller told 334 ms.
    const r = await take(400);
    expect(r.allowed).toBe(true);
    expect(dueAfterUs([1], r.debtUnits, baseNumbers(third))).toBeCloseTo(333_333.33, 1);
    // The key moves to 1 a second at 334 ms, when the caller goes: its token is the first under the new
    // numbers, so the next comes no sooner than 1 s later. Counting the 0.666 ms of 3 a second since the
    // slot gave it back 2 ms early (the take at 1,333 ms was allowed).
    at(334);
    await store.override('r:f6', { base: baseNumbers(third), limits: baseNumbers(policyOf({ capacity: 1, rate: { p: 1, q: 1 } })) });
    at(1333);
    expect((await take()).allowed).toBe(false);
    // 1 ms of the old rate not counted: 3 ms late at the new one, at most.
    at(1336);
    expect((await take()).allowed).toBe(true);
  });

  it('what it does not count is at most what the reservations of that ms took: 1 ms of a fast rate is not carried whole to a slow one (review 15, F1)', async () => {
    let nowUs = 1_790_000_000_000_000;
    const store = memoryStore({ nowMs: () => nowUs / 1000 });
    const fast = policyOf({ capacity: 10, rate: { p: 1_000_000, q: 1 } });
    const at0 = nowUs;
    const take = async (cost: number, maxWaitMs = 0) => store.step('r:lag', stepArgs(fast, cost, maxWaitMs));
    expect((await take(10)).allowed).toBe(true);
    // Reserved: its slot 1 µs on, its caller told 1 ms; the key moves to 5 a second then.
    const r = await take(1, 5);
    expect(toDecision(fast, 1, r)).toMatchObject({ allowed: true, waitMs: 1 });
    nowUs = at0 + 1000;
    await store.override('r:lag', { base: baseNumbers(fast), limits: baseNumbers(policyOf({ capacity: 5, rate: { p: 1, q: 1 } })) });
    // Exact: 1 token spent (the reservation's), 4 left. 1 ms of 1e6 a second is 1,000 tokens (996 s at 1
    // a second); what the reservations of that ms took is at most the capacity plus 1 µs of refill, 11.
    const five = policyUnder(fast, baseNumbers(policyOf({ capacity: 5, rate: { p: 1, q: 1 } })));
    const peek = toDecision(five, 0, await store.step('r:lag', stepArgs(fast, 0, 0)));
    expect(peek).toMatchObject({ remaining: 0, resetAfterMs: 11_000 });
  });

  it("a refund between a reservation's slot and its caller gives back none of what the reservation holds (review 16, F1)", async () => {
    let nowUs = 1_790_000_000_000_000;
    const store = memoryStore({ nowMs: () => nowUs / 1000 });
    const tenth = policyOf({ capacity: 1, rate: { p: 10, q: 1 } });
    const at0 = nowUs;
    const take = async (maxWaitMs = 0) => (await store.step('r:refund', stepArgs(tenth, 1, maxWaitMs))).allowed;
    expect(await take()).toBe(true);
    // At 0.5 ms a reservation: its slot at 100 ms, its caller told 100 ms, so it comes at 100.5 ms.
    nowUs = at0 + 500;
    expect(await take(1000)).toBe(true);
    // A refund at 100.2 ms gives nothing back (it gave the reservation's token, and a take at 100.7 ms
    // came on top of the caller: 2 in 0.2 ms where 1.012 are allowed).
    nowUs = at0 + 100_200;
    await store.step('r:refund', adjustArgs(tenth, -1));
    nowUs = at0 + 100_700;
    expect(await take()).toBe(false);
    nowUs = at0 + 200_000;
    expect(await take()).toBe(true);
  });

  it("a bucket full again before its reservation's caller comes is kept until then, so a change in that ms still finds the reservation (review 15, F2)", async () => {
    let nowUs = 1_790_000_000_000_000;
    const store = memoryStore({ nowMs: () => nowUs / 1000 });
    const fast = policyOf({ capacity: 10, rate: { p: 1_000_000, q: 1 } });
    const at0 = nowUs;
    expect((await store.step('r:gone', stepArgs(fast, 10, 0))).allowed).toBe(true);
    expect((await store.step('r:gone', stepArgs(fast, 1, 5))).allowed).toBe(true);
    // Full again 11 µs on; at the caller's ms a refund finds nothing to give back, and writes the bucket
    // (it deleted it, and the reservation with it: the change then found a full bucket).
    nowUs = at0 + 1000;
    expect((await store.step('r:gone', adjustArgs(fast, -1))).debtUnits).toEqual([0]);
    await store.override('r:gone', { base: baseNumbers(fast), limits: baseNumbers(policyOf({ capacity: 5, rate: { p: 1, q: 1 } })) });
    const five = policyUnder(fast, baseNumbers(policyOf({ capacity: 5, rate: { p: 1, q: 1 } })));
    expect(toDecision(five, 0, await store.step('r:gone', stepArgs(fast, 0, 0)))).toMatchObject({ remaining: 0, resetAfterMs: 11_000 });
  });
});
