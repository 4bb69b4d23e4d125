// The pure core of runtime limits (core/override.ts, core/units.ts) on chosen cases: the conversion rule,
// the carry of spent tokens, the expiry split, blocks and the policy-wide install. The BigInt model's
// property tests (test/override-model.test.ts) cover every sequence; these name the rules one by one.
import { describe, expect, it } from 'vitest';
import { adjustArgs, grantArgs, refundArgs, settleArgs, settledArgs, step, stepArgs, toDecision, type StepArgs } from '../src/core/gcra.js';
import { applyOverride, baseNumbers, debtsAt, keepUntilUs, numbersOf, policyUnder, priorOf, stepWithRecord, type OverrideRecord } from '../src/core/override.js';
import { resolvePolicy, type PolicyConfig } from '../src/core/policy.js';
import { convertUnits } from '../src/core/units.js';
import { MAX_LIMIT_UNITS } from '../src/core/policy.js';
import { MAX_WAIT_MS } from '../src/core/key.js';

const policy = (config: PolicyConfig) => resolvePolicy('p', config, { onStoreError: 'deny', timeoutMs: 1000 });
const numbers = (config: PolicyConfig) => baseNumbers(policy(config));
const T0 = 1_790_000_000_000_000;

describe('convertUnits: exact, or rounded against the caller', () => {
  it('same scale, a multiple, a divisor (up and down), and whole tokens when neither divides the other', () => {
    expect(convertUnits(77, 10, 10, 'up')).toBe(77);
    expect(convertUnits(77, 10, 30, 'up')).toBe(231);
    expect(convertUnits(77, 10, 30, 'down')).toBe(231);
    expect(convertUnits(77, 30, 10, 'up')).toBe(26);
    expect(convertUnits(77, 30, 10, 'down')).toBe(25);
    expect(convertUnits(78, 30, 10, 'up')).toBe(26);
    // 4 units of 6 per token, to tokens of 4: whole tokens, 1 up (4) or 0 down.
    expect(convertUnits(4, 6, 4, 'up')).toBe(4);
    expect(convertUnits(4, 6, 4, 'down')).toBe(0);
    expect(convertUnits(12, 6, 4, 'up')).toBe(8);
    expect(convertUnits(13, 6, 4, 'up')).toBe(12);
    expect(convertUnits(13, 6, 4, 'down')).toBe(8);
  });

  it('keeps the sign (a refund rounds its size down), and caps the size at MAX_LIMIT_UNITS', () => {
    expect(convertUnits(-77, 30, 10, 'down')).toBe(-25);
    expect(convertUnits(-13, 6, 4, 'down')).toBe(-8);
    expect(convertUnits(2 ** 50, 1, 1e6, 'up')).toBe(MAX_LIMIT_UNITS);
  });
});

describe('carrying a bucket to new numbers (applyOverride)', () => {
  const base = numbers({ capacity: 100, refillPerSecond: 1 });
  const tokenUnits = base[0]!.tokenUnits;
  const spent = (tokens: number) => ({ debtUnits: [tokens * tokenUnits], atUs: T0 });

  it('90 spent of 100 moved to a capacity of 50 has 0 left, and the next token comes once the debt has refilled below 50 at the new rate', () => {
    const half = numbers({ capacity: 50, refillPerSecond: 2 });
    const r = applyOverride(spent(90), undefined, T0, { base, limits: half });
    expect(r.after).toEqual({ limits: half });
    expect(r.writeRecord).toEqual({ limits: half });
    // The whole debt, in the new numbers' units (not cut to their capacity of 50).
    expect(r.write).toEqual({ debtUnits: [90 * half[0]!.tokenUnits], atUs: T0 });
    const p = policyUnder(policy({ capacity: 100, refillPerSecond: 1 }), half);
    const peekAt = (us: number) => stepWithRecord(r.write!, T0 + us, stepArgs(policy({ capacity: 100, refillPerSecond: 1 }), 0, 0), r.writeRecord!);
    // One second later the new rate (2/s) has refilled 2 tokens: 88 spent, still none left.
    expect(peekAt(1_000_000).limits).toEqual(half);
    expect(toDecision(p, 1, peekAt(1_000_000)).remaining).toBe(0);
    // 41 tokens at 2/s (20.5 s) bring the debt to 49: the first token, not a µs before.
    expect(toDecision(p, 1, peekAt(20_499_999)).remaining).toBe(0);
    expect(toDecision(p, 1, peekAt(20_500_000)).remaining).toBe(1);
  });

  it('moved up, the debt is kept and the headroom gained', () => {
    const big = numbers({ capacity: 1000, refillPerSecond: 1 });
    const r = applyOverride(spent(90), undefined, T0, { base, limits: big });
    expect(r.write).toEqual({ debtUnits: [90 * tokenUnits], atUs: T0 });
    expect(toDecision(policyUnder(policy({ capacity: 100, refillPerSecond: 1 }), big), 0, { allowed: true, debtUnits: [...r.write!.debtUnits] }).remaining).toBe(910);
  });

  it('a change of rate converts the debt between unit scales (1/s: 1e6 units a token; 1/3 per s: 3e6)', () => {
    const third = numbers({ capacity: 100, refillPerSecond: 1 / 3 });
    expect(third[0]!.tokenUnits).toBe(3_000_000);
    const r = applyOverride({ debtUnits: [1_500_001], atUs: T0 }, undefined, T0, { base, limits: third });
    expect(r.write!.debtUnits).toEqual([4_500_003]);
    // And back: 4_500_004 units of 3e6 are 1_500_001.33 of 1e6, rounded up.
    const back = applyOverride({ debtUnits: [4_500_004], atUs: T0 }, { limits: third }, T0, { base, limits: null });
    expect(back.write!.debtUnits).toEqual([1_500_002]);
    expect(back.after).toBeUndefined();
    expect(back.writeRecord).toBeNull();
  });

  it('with nothing to change it only reads: nothing written', () => {
    const r = applyOverride(spent(5), { limits: base }, T0, { base });
    expect(r).toEqual({ atUs: T0, before: { limits: base }, after: { limits: base }, stored: { limits: base } });
    expect(applyOverride(undefined, undefined, T0, { base })).toEqual({ atUs: T0 });
    // A read says the record as stored: a policy-wide change that has ended, with its end (`after` drops it).
    const ended = { limits: base, untilUs: T0 - 1, policyId: `${T0 - 5}.c#p` };
    expect(applyOverride(undefined, ended, T0, { base })).toEqual({ atUs: T0, before: { policyId: ended.policyId }, after: { policyId: ended.policyId }, stored: ended });
    // A change writes no `stored`.
    expect(applyOverride(undefined, ended, T0, { base, blockForMs: 5 }).stored).toBeUndefined();
  });

  it('a full bucket is not written: only the record is', () => {
    const r = applyOverride(undefined, undefined, T0, { base, limits: base, forMs: 1000 });
    expect(r.write).toBeUndefined();
    expect(r.writeRecord).toEqual({ limits: base, untilUs: T0 + 1_000_000 });
  });
});

describe('a reservation\'s caller comes up to 1 ms after its slot (CALLER_LAG_US, review 3, F6)', () => {
  const third = numbers({ capacity: 1, refillPerSecond: 3 });
  const one = numbers({ capacity: 1, refillPerSecond: 1 });
  const p = policy({ capacity: 1, refillPerSecond: 3 });
  const at = (us: number) => T0 + us;
  /** A token taken at 0 and one reserved: its slot at 333,334 µs, its caller told 334 ms. */
  const reserved = () => {
    const s = step(undefined, at(0), stepArgs(p, 1, 0)).write!;
    return step(s, at(0), stepArgs(p, 1, 400)).write!;
  };

  it('a bucket keeps its horizon until 1 ms past the slot, then drops it', () => {
    const s = reserved();
    expect(s.reservedUntilUs).toBe(at(333_334));
    // A charge writes the bucket: the horizon is kept while the caller may come.
    const charge = (us: number) => step(s, at(us), adjustArgs(p, 1)).write;
    expect(charge(334_000)?.reservedUntilUs).toBe(at(333_334));
    expect(charge(334_333)?.reservedUntilUs).toBe(at(333_334));
    expect(charge(334_334)?.reservedUntilUs).toBeUndefined();
  });

  it('a change while one is pending or due less than 1 ms before counts 1 ms less of the old refill, at most the capacity plus the refill from that ms to the slot; 1 ms after, the whole', () => {
    const s = reserved();
    const debtAfterChangeAt = (us: number) => applyOverride(s, undefined, at(us), { base: third, limits: one }).write!.debtUnits[0]!;
    // The debt at `us` (µs) plus `plusUs` of the old refill, carried to 1 a second (rounded up).
    const carried = (us: number, plusUs = 0) => convertUnits(s.debtUnits[0]! - (us - plusUs) * third[0]!.refillUnitsPerUs, third[0]!.tokenUnits, one[0]!.tokenUnits, 'up');
    // Pending: 1 ms of 3 a second (0.003 tokens) more than the bucket holds.
    expect(debtAfterChangeAt(100_000)).toBe(Math.max(carried(100_000, 1000), (333_334 - 100_000) * one[0]!.refillUnitsPerUs + carried(333_334, 1000)));
    // At the caller's ms: 1 ms less of it (0.003 tokens is less than the capacity, 1).
    expect(debtAfterChangeAt(334_000)).toBe(carried(334_000, 1000));
    expect(debtAfterChangeAt(334_333)).toBe(carried(334_333, 1000));
    // 1 ms after the slot the caller has come: the carry is exact.
    expect(debtAfterChangeAt(334_334)).toBe(carried(334_334));
    expect(debtAfterChangeAt(400_000)).toBe(carried(400_000));
  });
});

describe('an override that changes nothing writes nothing', () => {
  it('whatever order a record holds its fields in (a step installs a change\'s copy with its keys in another order than liveRecord rebuilds them: it was written again)', () => {
    const base = numbers({ capacity: 100, refillPerSecond: 1 });
    const change = { id: `${T0}.c`, limits: numbers({ capacity: 10, refillPerSecond: 1 }), untilUs: T0 + 5_000_000 };
    const installed = stepWithRecord(undefined, T0, stepArgs(policy({ capacity: 100, refillPerSecond: 1 }), 1, 0, change), undefined);
    expect(Object.keys(installed.writeRecord!)).toEqual(['limits', 'policyId', 'untilUs']);
    // A block that ends at once: the record after is the same, in liveRecord's order.
    const r = applyOverride(installed.write!, installed.writeRecord!, T0 + 1, { base, blockForMs: 0 });
    expect(r.after).toEqual(installed.writeRecord);
    expect(r).not.toHaveProperty('write');
    expect(r).not.toHaveProperty('writeRecord');
  });
});

describe('the expiry split: exact in both directions', () => {
  const config = { capacity: 100, refillPerSecond: 1 };
  const p = policy(config);
  const base = baseNumbers(p);

  it('a generous override that expires: refilled at its rate until untilUs, at the base rate after', () => {
    const fast = numbers({ capacity: 100, refillPerSecond: 100 });
    // 100 tokens spent under 100/s (1e4 units a token... here tokenUnits 10_000, 100 units per µs).
    const rec: OverrideRecord = { limits: fast, untilUs: T0 + 500_000 };
    const state = { debtUnits: [100 * fast[0]!.tokenUnits], atUs: T0 };
    // At untilUs half a second at 100/s has refilled 50: 50 spent, carried to the base (1e6 a token);
    // then 2 s at 1/s refill 2 more: 48 spent.
    const debts = debtsAt(state, T0 + 2_500_000, base, rec);
    expect(debts).toEqual([48 * base[0]!.tokenUnits]);
    const r = stepWithRecord(state, T0 + 2_500_000, stepArgs(p, 1, 0), rec);
    expect(r.limits).toBeUndefined();
    expect(toDecision(p, 1, r).remaining).toBe(51);
    // The step writes, so the spent record is dropped with the bucket in the base numbers.
    expect(r.writeRecord).toBeNull();
    expect(r.write).toEqual({ debtUnits: [49 * base[0]!.tokenUnits], atUs: T0 + 2_500_000 });
  });

  it('a strict override that expires: its slow refill until untilUs, then the base rate', () => {
    const slow = numbers({ capacity: 10, refillPerSecond: 0.1 });
    const rec: OverrideRecord = { limits: slow, untilUs: T0 + 10_000_000 };
    const state = { debtUnits: [10 * slow[0]!.tokenUnits], atUs: T0 };
    // 10 s at 0.1/s: 1 token back, 9 spent; carried to the base, then 5 s at 1/s: 4 spent.
    expect(debtsAt(state, T0 + 15_000_000, base, rec)).toEqual([4 * base[0]!.tokenUnits]);
    // Read before untilUs it is still in the record's numbers.
    expect(debtsAt(state, T0 + 5_000_000, base, rec)).toEqual([9.5 * slow[0]!.tokenUnits]);
  });
});

describe('blocks', () => {
  const p = policy({ capacity: 5, refillPerSecond: 1 });
  const base = baseNumbers(p);

  it('a blocked key refuses every take whatever its bucket holds (a take, a peek, a reservation, a lease grant), and nothing is written', () => {
    const set = applyOverride(undefined, undefined, T0, { base, blockForMs: 2000 });
    expect(set.after).toEqual({ blockedUntilUs: T0 + 2_000_000 });
    const rec = set.writeRecord!;
    for (const args of [stepArgs(p, 1, 0), stepArgs(p, 0, 0), stepArgs(p, 1, 60_000), grantArgs(p, 3)]) {
      const r = stepWithRecord(undefined, T0 + 1_999_999, args, rec);
      expect(r).toEqual({ allowed: false, debtUnits: [0], atUs: T0 + 1_999_999, blockedUntilUs: T0 + 2_000_000 });
      // Without StepArgs.base (a record of a block alone) too.
      const { base: _b, ...bare } = args;
      expect(stepWithRecord(undefined, T0 + 1_999_999, bare, rec)).toEqual(r);
    }
    // At its end the block is over: allowed, and the ended record dropped on the write.
    const after = stepWithRecord(undefined, T0 + 2_000_000, stepArgs(p, 1, 0), rec);
    expect(after.allowed).toBe(true);
    expect(after.blockedUntilUs).toBeUndefined();
    expect(after.writeRecord).toBeNull();
  });

  it('a charge, a refund and a settlement during a block are applied, as without it, and say the key is blocked', () => {
    const rec: OverrideRecord = { blockedUntilUs: T0 + 60_000_000 };
    const now = T0 + 1_000_000;
    const state = { debtUnits: [2_000_000], atUs: now };
    // A charge beyond the estimate: the work was done, so it is paid for (debt 2 + 4 tokens, up to the wait's cap).
    const charged = stepWithRecord(state, now, adjustArgs(p, 4), rec);
    expect(charged).toEqual({ allowed: true, debtUnits: [6_000_000], atUs: now, write: { debtUnits: [6_000_000], atUs: now }, blockedUntilUs: T0 + 60_000_000 });
    // A refund and a lease's late refund give back, never below full.
    expect(stepWithRecord(state, now, adjustArgs(p, -1), rec)).toMatchObject({ allowed: true, debtUnits: [1_000_000], blockedUntilUs: T0 + 60_000_000 });
    expect(stepWithRecord(state, now, refundArgs(p, 5_000_000, now - 500_000), rec)).toMatchObject({ debtUnits: [0], write: null, blockedUntilUs: T0 + 60_000_000 });
    // A settlement (its charge took 1 token; actual 3): 2 more charged.
    expect(stepWithRecord(state, now, settledArgs(settleArgs(p, 3, 'c'), [1_000_000]), rec)).toMatchObject({ debtUnits: [4_000_000], blockedUntilUs: T0 + 60_000_000 });
    // Without StepArgs.base (a record of a block alone): the same.
    const { base: _b, ...bare } = adjustArgs(p, 4);
    expect(stepWithRecord(state, now, bare, rec)).toEqual(charged);
    // The record is left as it is: nothing to write but the bucket.
    expect(charged.writeRecord).toBeUndefined();
  });

  it('during a block, an adjustment runs under the numbers in force: a key\'s own, or a policy-wide change it installs', () => {
    const third = numbers({ capacity: 3, refillPerSecond: 1 / 3 });
    const until = T0 + 60_000_000;
    const own = stepWithRecord(undefined, T0, adjustArgs(p, 2), { limits: third, blockedUntilUs: until });
    expect(own).toMatchObject({ allowed: true, debtUnits: [2 * third[0]!.tokenUnits], limits: third, blockedUntilUs: until });
    expect(own.writeRecord).toBeUndefined();
    // A policy-wide change is installed by the adjustment, the block kept; and by a take the block
    // refuses, which takes nothing (the 1 spent, carried).
    const change = { id: 'c1', limits: third };
    const installed = stepWithRecord({ debtUnits: [1_000_000], atUs: T0 }, T0, { ...adjustArgs(p, 1), policy: change }, { blockedUntilUs: until });
    expect(installed).toMatchObject({ debtUnits: [2 * third[0]!.tokenUnits], limits: third, blockedUntilUs: until });
    expect(installed.writeRecord).toEqual({ limits: third, policyId: 'c1', blockedUntilUs: until });
    const refused = stepWithRecord({ debtUnits: [1_000_000], atUs: T0 }, T0, { ...stepArgs(p, 1, 0), policy: change }, { blockedUntilUs: until });
    expect(refused).toEqual({ allowed: false, debtUnits: [third[0]!.tokenUnits], atUs: T0, blockedUntilUs: until, limits: third, write: { debtUnits: [third[0]!.tokenUnits], atUs: T0 }, writeRecord: { limits: third, policyId: 'c1', blockedUntilUs: until } });
    // With the change already installed, a refused take writes nothing.
    expect(stepWithRecord(refused.write!, T0 + 1, { ...stepArgs(p, 1, 0), policy: change }, refused.writeRecord!)).toEqual({ allowed: false, debtUnits: [third[0]!.tokenUnits - 1], atUs: T0 + 1, blockedUntilUs: until, limits: third });
  });

  it('unblock keeps the numbers; a block keeps the numbers', () => {
    const ten = numbers({ capacity: 10, refillPerSecond: 1 });
    const rec = applyOverride(undefined, { limits: ten }, T0, { base, blockForMs: 1000 }).after!;
    expect(rec).toEqual({ limits: ten, blockedUntilUs: T0 + 1_000_000 });
    expect(applyOverride(undefined, rec, T0, { base, blockForMs: null }).after).toEqual({ limits: ten });
  });
});

describe('steps under a record', () => {
  const p = policy({ capacity: 5, refillPerSecond: 1 });
  const base = baseNumbers(p);

  it('with no record and no policy-wide change, stepWithRecord is step', () => {
    const args = stepArgs(p, 2, 0);
    expect(stepWithRecord(undefined, T0, args, undefined)).toEqual(step(undefined, T0, args));
  });

  it('a take, a grant and a refund run under the record numbers, costs converted', () => {
    const third = numbers({ capacity: 3, refillPerSecond: 1 / 3 });
    const rec: OverrideRecord = { limits: third };
    const take = stepWithRecord(undefined, T0, stepArgs(p, 2, 0), rec);
    expect(take).toMatchObject({ allowed: true, debtUnits: [6_000_000], limits: third });
    expect(stepWithRecord(take.write!, T0, stepArgs(p, 2, 0), rec)).toMatchObject({ allowed: false, debtUnits: [6_000_000] });
    const grant = stepWithRecord(take.write!, T0, grantArgs(p, 5), rec);
    expect(grant).toMatchObject({ allowed: true, tokens: 1, debtUnits: [9_000_000] });
    const refund = stepWithRecord(grant.write!, T0, refundArgs(p, 1_000_000), rec);
    expect(refund).toMatchObject({ allowed: true, debtUnits: [6_000_000] });
    // A reservation's cap is the record's capacity plus the wait at the record's rate (1 token per 3 s).
    const wait = stepWithRecord(refund.write!, T0, stepArgs(p, 2, 3000), rec);
    expect(wait).toMatchObject({ allowed: true, debtUnits: [12_000_000] });
    expect(stepWithRecord(wait.write!, T0, stepArgs(p, 1, 2999), rec).allowed).toBe(false);
  });

  it('an adjustment under a record: a charge up to MAX_WAIT_MS of the record refill beyond its capacity', () => {
    const two = numbers({ capacity: 2, refillPerSecond: 1 });
    const r = stepWithRecord(undefined, T0, adjustArgs(p, 1e6), { limits: two });
    expect(r.debtUnits).toEqual([two[0]!.capacityUnits + MAX_WAIT_MS * 1000]);
  });

  it('a late refund under a record gives back the lesser of what is left under either refill', () => {
    const slow = numbers({ capacity: 5, refillPerSecond: 0.5 });
    const rec: OverrideRecord = { limits: slow };
    // 4 tokens spent under the record (2e6 units a token), 2 granted 1 s before: at the base's 1/s one
    // of them has refilled, at the record's 0.5/s half of one: the base's decay counts, 1 token back.
    const state = { debtUnits: [8_000_000], atUs: T0 };
    const r = stepWithRecord(state, T0, refundArgs(p, 2_000_000, T0 - 1_000_000), rec);
    expect(r.debtUnits).toEqual([6_000_000]);
  });

  it('a step without StepArgs.base on a key with numbers is refused loudly; with a block alone it is honoured', () => {
    const bare: StepArgs = { limits: stepArgs(p, 1, 0).limits };
    expect(() => stepWithRecord(undefined, T0, bare, { limits: base })).toThrow(/StepArgs\.base/);
    expect(stepWithRecord(undefined, T0, bare, { blockedUntilUs: T0 + 1 })).toMatchObject({ allowed: false, blockedUntilUs: T0 + 1 });
  });

  it('a policy-wide change is installed on a key without a record, kept beside its own block, ignored by a key with its own numbers, and cleared when no longer seen', () => {
    const wide = numbers({ capacity: 2, refillPerSecond: 1 });
    const change = { id: 'c1', limits: wide };
    const first = stepWithRecord({ debtUnits: [4_000_000], atUs: T0 }, T0, stepArgs(p, 1, 0, change), undefined);
    // 4 spent of 5 moved to capacity 2: the 4 stay spent (none left), and the take of 1 is refused.
    expect(first).toMatchObject({ allowed: false, debtUnits: [4_000_000], limits: wide, writeRecord: { limits: wide, policyId: 'c1' }, write: { debtUnits: [4_000_000], atUs: T0 } });
    const own = numbers({ capacity: 50, refillPerSecond: 1 });
    expect(stepWithRecord(undefined, T0, stepArgs(p, 1, 0, change), { limits: own })).toMatchObject({ allowed: true, limits: own });
    // A blocked key is refused, nothing taken, and the change installed beside its block all the same
    // (it reaches the key now, not once the block is over); after the block it is installed too.
    const blocked = stepWithRecord(undefined, T0, stepArgs(p, 1, 0, change), { blockedUntilUs: T0 + 5 });
    expect(blocked).toEqual({ allowed: false, debtUnits: [0], atUs: T0, blockedUntilUs: T0 + 5, limits: wide, writeRecord: { limits: wide, policyId: 'c1', blockedUntilUs: T0 + 5 } });
    expect(stepWithRecord(undefined, T0 + 5, stepArgs(p, 1, 0, change), { blockedUntilUs: T0 + 5 }).writeRecord).toEqual({ limits: wide, policyId: 'c1' });
    expect(applyOverride(undefined, { limits: wide, policyId: 'c1' }, T0, { base: baseNumbers(p), blockForMs: 1 }).after).toEqual({ limits: wide, policyId: 'c1', blockedUntilUs: T0 + 1000 });
    // A step with no view keeps the copy (a node that has read nothing is the oldest view) and decides under it.
    expect(stepWithRecord(first.write!, T0 + 1, stepArgs(p, 1, 0), first.writeRecord!)).toMatchObject({ allowed: false, limits: wide });
    // Cleared a µs later (the node read the revert's marker, version 7): the 4 (less a µs of refill)
    // carried back to capacity 5, so 1 is admitted, and only 1; the marker of that reading stays.
    const cleared = stepWithRecord(first.write!, T0 + 1, stepArgs(p, 1, 0, undefined, 7), first.writeRecord!);
    expect(cleared).toMatchObject({ allowed: true, writeRecord: { policyId: '7.' }, debtUnits: [4_999_999] });
    expect(cleared.limits).toBeUndefined();
  });

  it('a key\'s copy of a change that ends becomes the marker of that change: a node still holding an older change does not install it again', () => {
    const wide = numbers({ capacity: 2, refillPerSecond: 1 });
    const older = { id: '5.old#p', limits: numbers({ capacity: 50, refillPerSecond: 1 }) };
    const ended = { id: '9.new#p', limits: wide, untilUs: T0 + 10 };
    const copy = stepWithRecord(undefined, T0, stepArgs(p, 1, 0, ended), undefined);
    expect(copy.writeRecord).toEqual({ limits: wide, policyId: '9.new#p', untilUs: T0 + 10 });
    // Past its end, a step with that change's view leaves its marker, and one with the older view keeps it.
    const marked = stepWithRecord(copy.write!, T0 + 10, stepArgs(p, 1, 0, ended), copy.writeRecord!);
    expect(marked.writeRecord).toEqual({ policyId: '9.new#p' });
    expect(marked.limits).toBeUndefined();
    const stale = stepWithRecord(marked.write!, T0 + 11, stepArgs(p, 1, 0, older), marked.writeRecord!);
    expect(stale.limits).toBeUndefined();
    expect(stale.writeRecord).toBeUndefined();
    // The same with a step that comes first after the end (nothing written in between).
    expect(stepWithRecord(copy.write!, T0 + 11, stepArgs(p, 1, 0, older), copy.writeRecord!)).toMatchObject({ writeRecord: { policyId: '9.new#p' } });
    // A key's clear (limits: null) takes its own numbers only: a copy or a marker stays.
    expect(applyOverride(undefined, { limits: wide, policyId: '9.new#p' }, T0, { base: baseNumbers(p), limits: null }).after).toEqual({ limits: wide, policyId: '9.new#p' });
    expect(applyOverride(undefined, { policyId: '9.' }, T0, { base: baseNumbers(p), limits: null }).after).toEqual({ policyId: '9.' });
  });
});

describe('policyUnder: the decision of a step under a record', () => {
  it('has the record capacity as the limit and its rate for the times', () => {
    const p = policy({ limits: { a: { capacity: 5, refillPerSecond: 1 }, b: { capacity: 100, refillPerSecond: 10 } } });
    const u = policyUnder(p, [numbersOf(policy({ capacity: 7, refillPerSecond: 2 })), baseNumbers(p)[1]!]);
    expect(u.limits.map((l) => [l.name, l.capacity, l.refillPerSecond, l.rateNumerator, l.rateDenominator])).toEqual([
      ['a', 7, 2, 2, 1],
      ['b', 100, 10, 10, 1],
    ]);
    expect(u.limits[1]).toBe(p.limits[1]);
  });
});

describe('keepUntilUs: how long a store keeps a key (its expiry, its alarm)', () => {
  const base = numbers({ capacity: 100, refillPerSecond: 1 });
  const slow = numbers({ capacity: 10, refillPerSecond: 0.1 });

  it('a bucket alone: until it is full; a record: until its numbers and block end, forever for numbers with no end', () => {
    expect(keepUntilUs(undefined, base, undefined)).toBe(0);
    expect(keepUntilUs({ debtUnits: [3_000_000], atUs: T0 }, base, undefined)).toBe(T0 + 3_000_000);
    expect(keepUntilUs(undefined, base, { limits: slow })).toBe(Infinity);
    expect(keepUntilUs(undefined, base, { limits: slow, untilUs: T0 + 5, blockedUntilUs: T0 + 9 })).toBe(T0 + 9);
    expect(keepUntilUs(undefined, base, { blockedUntilUs: T0 + 9 })).toBe(T0 + 9);
  });

  it('under a key\'s own numbers that end before the bucket is full: kept until its next step; ending after it is full, until their end', () => {
    // 10 tokens spent at 0.1/s; after 10 s (the end) 9 remain spent. From its end the key goes to a
    // policy-wide change made by then (debtsAt), which may be made after this write and be as slow as
    // anything: kept until the key's next step, which knows it.
    const state = { debtUnits: [10 * slow[0]!.tokenUnits], atUs: T0 };
    expect(keepUntilUs(state, base, { limits: slow, untilUs: T0 + 10_000_000 })).toBe(Infinity);
    // Numbers faster than the base, 10 spent at 10/s ending at 0.5 s: 5 left at the end, the same.
    const fast = numbers({ capacity: 10, refillPerSecond: 10 })[0]!;
    expect(keepUntilUs({ debtUnits: [10 * fast.tokenUnits], atUs: T0 }, base, { limits: [fast], untilUs: T0 + 500_000 })).toBe(Infinity);
    // Full exactly at the end (10 at 10/s ending at 1 s): the end itself.
    expect(keepUntilUs({ debtUnits: [10 * fast.tokenUnits], atUs: T0 }, base, { limits: [fast], untilUs: T0 + 1_000_000 })).toBe(T0 + 1_000_000);
    // Ending after the bucket is full under them: the end itself.
    expect(keepUntilUs(state, base, { limits: slow, untilUs: T0 + 200_000_000 })).toBe(T0 + 200_000_000);
  });

  it('under a copy of a policy-wide change that ends before the bucket is full: kept until its next step, as under a key\'s own (late-copy); ending after it is full, until full', () => {
    // 10 spent at 0.1/s, the copy ending at 10 s: 9 left. From its end the key is in the change in force
    // then, which may have replaced this one before its end and be as slow as anything.
    const state = { debtUnits: [10 * slow[0]!.tokenUnits], atUs: T0 };
    expect(keepUntilUs(state, base, { limits: slow, policyId: 'w', untilUs: T0 + 10_000_000 })).toBe(Infinity);
    const fast = numbers({ capacity: 10, refillPerSecond: 10 })[0]!;
    expect(keepUntilUs({ debtUnits: [10 * fast.tokenUnits], atUs: T0 }, base, { limits: [fast], policyId: 'w', untilUs: T0 + 500_000 })).toBe(Infinity);
    // Full exactly at its end, or before: the copy does not hold the key (full at 1 s).
    expect(keepUntilUs({ debtUnits: [10 * fast.tokenUnits], atUs: T0 }, base, { limits: [fast], policyId: 'w', untilUs: T0 + 1_000_000 })).toBe(T0 + 1_000_000);
    expect(keepUntilUs({ debtUnits: [10 * fast.tokenUnits], atUs: T0 }, base, { limits: [fast], policyId: 'w', untilUs: T0 + 3_000_000 })).toBe(T0 + 1_000_000);
  });

  it('a key\'s copy of a policy-wide change does not hold the key (the next step installs it again); the change itself, pinned, does', () => {
    const state = { debtUnits: [10 * slow[0]!.tokenUnits], atUs: T0 };
    expect(keepUntilUs(undefined, base, { limits: slow, policyId: 'w' })).toBe(0);
    // 10 spent at 0.1/s: full 100 s later, in the copy's numbers.
    expect(keepUntilUs(state, base, { limits: slow, policyId: 'w' })).toBe(T0 + 100_000_000);
    expect(keepUntilUs(undefined, base, { limits: slow, policyId: 'w', blockedUntilUs: T0 + 9 })).toBe(T0 + 9);
    expect(keepUntilUs(undefined, base, { limits: slow, policyId: 'w' }, true)).toBe(Infinity);
    // The change itself with an end, pinned, is kept past it too (review 9, F1: a node holding an older
    // change reads from it that this one was made and has ended).
    expect(keepUntilUs(undefined, base, { limits: slow, policyId: 'w', untilUs: T0 + 5 }, true)).toBe(Infinity);
  });
});

describe('what a policy-wide record names of the one it replaced (priorOf), and a step that cannot tell what a key missed', () => {
  const p = resolvePolicy('p', { capacity: 10, refillPerSecond: 10 }, { onStoreError: 'deny', timeoutMs: 1000 });
  const base = baseNumbers(p);
  const slow = baseNumbers(resolvePolicy('p', { capacity: 10, refillPerSecond: 0.01 }, { onStoreError: 'deny', timeoutMs: 1000 }));
  const T = 1_790_000_000_000_000;

  it('an id says the version replaced and since when the policy\'s numbers were in force up to it: none, a change in force, a change ended, a revert', () => {
    let rec: OverrideRecord | undefined;
    const set = (t: number, args: Partial<Parameters<typeof applyOverride>[3]>) => (rec = applyOverride(undefined, rec, t, { base, ...args }).after);
    expect(set(T, { limits: slow, forMs: 1000, policyId: 'a#' })!.policyId).toBe(`${T}.0.0.a#`);
    expect(priorOf(rec!.policyId)).toEqual([0, 0]);
    // Replaced after its end: the policy's numbers since that end.
    expect(set(T + 5_000_000, { limits: slow, policyId: 'b#' })!.policyId).toBe(`${T + 5_000_000}.${T}.${T + 1_000_000}.b#`);
    // Replaced while in force: since its own version.
    expect(set(T + 6_000_000, { limits: null, policyId: 'r#' })!.policyId).toBe(`${T + 6_000_000}.${T + 5_000_000}.${T + 6_000_000}.r#`);
    // A revert replaced: since the revert's own since.
    expect(set(T + 7_000_000, { limits: slow, policyId: 'c#' })!.policyId).toBe(`${T + 7_000_000}.${T + 6_000_000}.${T + 6_000_000}.c#`);
    // A marker a step writes, or an id of before, says nothing.
    expect([priorOf(`${T}.`), priorOf(`${T}.a#`), priorOf(undefined)]).toEqual([undefined, undefined, undefined]);
  });

  const spent = (atUs: number, record?: OverrideRecord) => ({ state: { debtUnits: [10 * p.limits[0]!.tokenUnits], atUs }, record });
  const peek = (s: ReturnType<typeof spent>, nowUs: number, view: Parameters<typeof stepArgs>[3], seenUs?: number) => stepWithRecord(s.state, nowUs, stepArgs(p, 0, 0, view, seenUs), s.record).debtUnits[0]!;
  const rate = p.limits[0]!.refillUnitsPerUs;
  const full = 10 * p.limits[0]!.tokenUnits;

  it('a key in the policy\'s numbers written before they were last in force up to the record seen refills nothing until its version; written since, exactly', () => {
    // A change that replaced one in force at T + 1 s (since = its version): a key written at T missed it.
    const c = { id: `${T + 2_000_000}.${T + 1_000_000}.${T + 2_000_000}.c#`, limits: base };
    expect(peek(spent(T), T + 2_100_000, c)).toBe(full - 100_000 * rate);
    // The policy's numbers since T (a revert, then this change): a key written at T ran up to it.
    const d = { id: `${T + 2_000_000}.${T + 1_000_000}.${T}.d#`, limits: base };
    expect(peek(spent(T), T + 500_000, d)).toBe(full - 500_000 * rate);
    // A revert seen (no change, its version): the same, by the version read.
    expect(peek(spent(T), T + 2_100_000, undefined, T + 2_000_000)).toBe(full - 100_000 * rate);
    expect(peek(spent(T + 2_000_000), T + 2_100_000, undefined, T + 2_000_000)).toBe(full - 100_000 * rate);
  });

  it('a key holding a copy of a change other than the one replaced refills nothing until the record seen; of the one replaced, exactly', () => {
    const a = { id: `${T}.0.0.a#`, limits: base };
    const copy = { limits: base, policyId: a.id };
    const replacedA = { id: `${T + 2_000_000}.${T}.${T + 2_000_000}.b#`, limits: base };
    const replacedOther = { id: `${T + 2_000_000}.${T + 1_000_000}.${T + 2_000_000}.b#`, limits: base };
    expect(peek(spent(T, copy), T + 2_100_000, replacedA)).toBe(Math.max(0, full - 2_100_000 * rate));
    expect(peek(spent(T, copy), T + 2_100_000, replacedOther)).toBe(full - 100_000 * rate);
    // Under a revert (which does not say what it replaced): any copy.
    expect(peek(spent(T, copy), T + 2_100_000, undefined, T + 2_000_000)).toBe(full - 100_000 * rate);
    // A change seen that has ended after the key's last write: nothing until its end.
    const ended = { id: `${T + 500_000}.0.0.e#`, limits: slow, untilUs: T + 2_000_000 };
    expect(peek(spent(T), T + 2_100_000, ended)).toBe(full - 100_000 * rate);
  });
});
