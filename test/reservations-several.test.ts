// Reservations on a policy of several limits: a reservation comes when its slowest limit allows, and
// every limit it charges must count it then (a limit that refills sooner must not admit more on top of
// it when it comes). Each admission is counted when it is due, on each limit by the tokens it charged
// that limit, and every window that starts at or after a change (or the start) and holds an admission
// decided under those numbers holds no more than they allow on each limit: capacity plus the refill
// over the window. Memory store (core), fake clock, per-key changes of all or some limits between takes.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CALLER_LAG_US, stepArgs, toDecision } from '../src/core/gcra.js';
import { baseNumbers, policyUnder } from '../src/core/override.js';
import { resolvePolicy, type ResolvedPolicy } from '../src/core/policy.js';
import type { OverrideLimit } from '../src/store.js';
import { memoryStore } from '../src/stores/memory.js';
import { rateArb } from './support/exact-bucket.js';
import { dueAfterUs, overWindow, type Admission } from './support/windows.js';

type Spec = { capacity: number; rate: { p: number; q: number } };
const spec = fc.record({ capacity: fc.integer({ min: 1, max: 10 }), rate: rateArb });
const gap = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 400 }), fc.integer({ min: 1, max: 20_000 }), fc.integer({ min: 0, max: 2000 }).map((ms) => ms * 1000));

const caseArb = fc.integer({ min: 2, max: 3 }).chain((n) => {
  const take = fc.record({ dtUs: gap, costs: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: n, maxLength: n }), maxWaitMs: fc.constantFrom(0, 1, 5, 20, 250, 5000, 5000) });
  return fc.record({
    base: fc.array(spec, { minLength: n, maxLength: n }),
    first: fc.array(take, { minLength: 1, maxLength: 14 }),
    phases: fc.array(fc.record({ numbers: fc.array(fc.option(spec, { nil: undefined }), { minLength: n, maxLength: n }), takes: fc.array(take, { maxLength: 12 }) }), { maxLength: 2 }),
  });
});

const policyOf = (specs: Spec[]): ResolvedPolicy =>
  resolvePolicy('r', { limits: Object.fromEntries(specs.map((s, i) => [`l${i}`, { capacity: s.capacity, refillPerSecond: s.rate.p / s.rate.q }])) }, { onStoreError: 'deny', timeoutMs: 1000 });

describe('reservations on a policy of several limits (memory store, fake clock)', () => {
  it('every window from the start or a change that holds an admission decided under those numbers holds no more than each limit allows, reservations counted when due', async () => {
    await fc.assert(
      fc.asyncProperty(caseArb, async ({ base, first, phases }) => {
        const originUs = 1_790_000_000_000_000;
        let nowUs = originUs;
        const store = memoryStore({ nowMs: () => nowUs / 1000 });
        const policy = policyOf(base);
        const own = baseNumbers(policy);
        const admitted: Admission[] = [];
        // The same admissions counted when their callers come: the decision's time plus its waitMs.
        const callers: Admission[] = [];
        const segments: { startUs: number; numbers: readonly OverrideLimit[] }[] = [{ startUs: 0, numbers: own }];
        const run = async (takes: { dtUs: number; costs: number[]; maxWaitMs: number }[]) => {
          for (const t of takes) {
            nowUs += t.dtUs;
            const costs: number[] = t.costs.map((c, i) => Math.min(c, base[i]!.capacity));
            if (!costs.some((c) => c > 0)) costs[0] = Math.min(1, base[0]!.capacity);
            const r = await store.step('r:k', stepArgs(policy, costs, t.maxWaitMs));
            if (!r.allowed) continue;
            const n = r.limits ?? own;
            expect(n).toEqual(segments.at(-1)!.numbers);
            // Due when every limit it charged has refilled to its capacity (exact, relative to the origin).
            admitted.push({ dueUs: nowUs - originUs + dueAfterUs(costs, r.debtUnits, n), costs, under: segments.length - 1 });
            callers.push({ dueUs: nowUs - originUs + toDecision(policyUnder(policy, n), costs, r).waitMs * 1000, costs, under: segments.length - 1 });
          }
        };
        await run(first);
        for (const phase of phases) {
          nowUs += 1;
          const set = baseNumbers(policyOf(phase.numbers.map((s, i) => s ?? base[i]!)));
          await store.override('r:k', { base: own, limits: set });
          segments.push({ startUs: nowUs - originUs, numbers: set });
          await run(phase.takes);
        }
        // Windows from the start and from each change on, every limit (see overWindow).
        expect(overWindow(admitted, segments, 0)).toBeUndefined();
        // And as the callers see it, each window with the ms a caller may come after its slot (review 3, F6).
        expect(overWindow(callers, segments, 0, CALLER_LAG_US)).toBeUndefined();
      }),
      { numRuns: Number(process.env.RUNS ?? 300) },
    );
  }, 120_000);
});
