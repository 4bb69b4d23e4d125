// MongoDB store: policy-wide changes are ordered (core 41ade5e), in the pipelines evaluated by mingo on a
// fake clock ($$NOW is Date.now). A key's copy of a change newer than a step's view decides that step
// and stays; a step that read no change after the copy's replaces it with a marker; the override
// pipeline versions a change's id by the store clock, and a clear leaves a pinned marker.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BSON } from 'mongodb';
import { mongoStore, stepPipeline } from '../src/stores/mongodb.js';
import { adjustArgs, stepArgs } from '../src/core/gcra.js';
import { numbersOf, type PolicyOverride } from '../src/core/override.js';
import { resolvePolicy } from '../src/core/policy.js';
import { createLimiter, StoreError } from '../src/index.js';
import { MingoCollection } from './support/mingo-collection.js';

let now = 1_790_000_000_000;
let clock: { mockRestore(): void } | undefined;
beforeEach(() => {
  now = 1_790_000_000_000;
  clock = vi.spyOn(Date, 'now').mockImplementation(() => now);
});
afterEach(() => clock?.mockRestore());

const settings = { onStoreError: 'deny' as const, timeoutMs: 1000 };
// The policy: 10 at 1 per second; the changes' numbers: 2 or 5 at the same rate (same token units).
const policy = resolvePolicy('p', { capacity: 10, refillPerSecond: 1 }, settings);
const base = policy.limits.map(numbersOf);
const two = resolvePolicy('q', { capacity: 2, refillPerSecond: 1 }, settings).limits.map(numbersOf);
const five = resolvePolicy('q', { capacity: 5, refillPerSecond: 1 }, settings).limits.map(numbersOf);
const u = policy.tokenUnits;

function fixture() {
  const collection = new MingoCollection();
  const store = mongoStore({ collection });
  const doc = (id: string) => collection.docs.find((d) => d._id === id);
  const bytes = (id: string) => Buffer.from(BSON.serialize(doc(id)!)).toString('hex');
  return { collection, store, doc, bytes };
}

describe('mongodb store: a key\'s copy of a newer policy-wide change decides a step with an older view, and stays', () => {
  it('copy of v2; steps seeing v1, or none read before v2: decided under v2 (refused when v2 is spent), the copy kept, a refusal writes nothing', async () => {
    const { store, doc, bytes } = fixture();
    const t = now * 1000;
    const v1: PolicyOverride = { id: `${t}.one#`, limits: five };
    const v2: PolicyOverride = { id: `${t + 1000}.two#`, limits: two };
    expect(await store.step('k', stepArgs(policy, 1, 0, v2))).toMatchObject({ allowed: true, debtUnits: [u], limits: two });
    expect(doc('k')!.ov).toEqual({ limits: two, policyId: v2.id });
    // A node that still sees v1: v2 (2 tokens) decides; under v1 (5) these would be allowed.
    expect(await store.step('k', stepArgs(policy, 1, 0, v1))).toMatchObject({ allowed: true, debtUnits: [2 * u], limits: two });
    expect(doc('k')!.ov).toEqual({ limits: two, policyId: v2.id });
    const spent = bytes('k');
    expect(await store.step('k', stepArgs(policy, 1, 0, v1))).toMatchObject({ allowed: false, debtUnits: [2 * u], limits: two });
    // A node that read no change before v2 was made (policySeenUs below v2's version, or at it).
    expect(await store.step('k', stepArgs(policy, 1, 0, undefined, t + 999))).toMatchObject({ allowed: false, debtUnits: [2 * u], limits: two });
    expect(await store.step('k', stepArgs(policy, 1, 0, undefined, t + 1000))).toMatchObject({ allowed: false, limits: two });
    expect(bytes('k')).toBe(spent);
    // A node with v2's view decides under it as before; v2 has refilled one token a second later.
    now += 1000;
    expect(await store.step('k', stepArgs(policy, 1, 0, v2))).toMatchObject({ allowed: true, debtUnits: [2 * u], limits: two });
  });
});

describe('mongodb store: a step that read no change after a key\'s copy leaves the marker "<seenUs>."', () => {
  it('the marker replaces the copy with the bucket carried to the base; an older view does not install the change again; a newer change replaces the marker', async () => {
    const { store, doc } = fixture();
    const t = now * 1000;
    const v1: PolicyOverride = { id: `${t}.one#`, limits: five };
    expect(await store.step('k', stepArgs(policy, 3, 0, v1))).toMatchObject({ allowed: true, debtUnits: [3 * u], limits: five });
    // Read at t + 2 ms that no change is in force (a revert of v1).
    const seen = t + 2000;
    const r = await store.step('k', stepArgs(policy, 1, 0, undefined, seen));
    expect(r).toEqual({ allowed: true, debtUnits: [4 * u], atUs: t });
    expect(doc('k')).toMatchObject({ debt: [4 * u], atUs: t });
    expect(doc('k')!.ov).toStrictEqual({ policyId: `${seen}.` });
    // A node that still sees v1 (older than the marker): the base decides (10), the marker stays.
    for (let i = 0; i < 6; i++) expect(await store.step('k', stepArgs(policy, 1, 0, v1))).toEqual({ allowed: true, debtUnits: [(5 + i) * u], atUs: t });
    expect(await store.step('k', stepArgs(policy, 1, 0, v1))).toEqual({ allowed: false, debtUnits: [10 * u], atUs: t });
    expect(doc('k')!.ov).toEqual({ policyId: `${seen}.` });
    // A node with the same reading, or a later one, leaves the marker as it is.
    await store.step('k', stepArgs(policy, 0, 0, undefined, seen + 5000));
    expect(doc('k')!.ov).toEqual({ policyId: `${seen}.` });
    // A change made after the reading replaces the marker.
    const v3: PolicyOverride = { id: `${t + 3000}.three#`, limits: two };
    expect(await store.step('k', stepArgs(policy, 0, 0, v3))).toMatchObject({ allowed: true, limits: two });
    expect(doc('k')!.ov).toEqual({ limits: two, policyId: v3.id });
  });

  it('a step with no view (no policySeenUs: the oldest) keeps the key\'s copy and decides under it; a marker stays too', async () => {
    const { store, doc, bytes } = fixture();
    const t = now * 1000;
    const v1: PolicyOverride = { id: `${t}.one#`, limits: five };
    await store.step('k', stepArgs(policy, 3, 0, v1));
    // Under v1's 5: one more is allowed, then 2 are refused (the base's 10 would allow them).
    expect(await store.step('k', stepArgs(policy, 1, 0))).toEqual({ allowed: true, debtUnits: [4 * u], atUs: t, limits: five });
    expect(doc('k')!.ov).toEqual({ limits: five, policyId: v1.id });
    const spent = bytes('k');
    expect(await store.step('k', stepArgs(policy, 2, 0))).toEqual({ allowed: false, debtUnits: [4 * u], atUs: t, limits: five });
    expect(bytes('k')).toBe(spent);
    // A marker: a step with no view leaves it, and decides under the base.
    await store.step('k', stepArgs(policy, 0, 0, undefined, t + 1));
    expect(doc('k')!.ov).toStrictEqual({ policyId: `${t + 1}.` });
    expect(await store.step('k', stepArgs(policy, 2, 0))).toEqual({ allowed: true, debtUnits: [6 * u], atUs: t });
    expect(doc('k')!.ov).toStrictEqual({ policyId: `${t + 1}.` });
  });
});

describe('mongodb store: a key\'s copy of a change that ends becomes the marker of that change', () => {
  it('the ended copy leaves { policyId: the change\'s id } (its block kept); a step with an older change\'s view then decides under the base and does not install it; a newer change does', async () => {
    const { store, doc } = fixture();
    const t = now * 1000;
    const v0: PolicyOverride = { id: `${t - 5000}.zero#`, limits: five };
    // v1: 2 tokens for 1 s.
    const v1: PolicyOverride = { id: `${t}.one#`, limits: two, untilUs: t + 1_000_000 };
    expect(await store.step('k', stepArgs(policy, 2, 0, v1))).toMatchObject({ allowed: true, limits: two });
    await store.override!('k', { base, blockForMs: 60_000 });
    now += 2000;
    // A node that still sees v0 (older than v1): v1's marker stays, and the base decides (an adjustment
    // is applied on the blocked key).
    const r = await store.step('k', adjustArgs(policy, 1, v0));
    expect(r).toEqual({ allowed: true, debtUnits: [u], atUs: now * 1000, blockedUntilUs: t + 60_000_000 });
    // (toEqual: mingo keeps a field an object expression set to $$REMOVE, as undefined.)
    expect(doc('k')!.ov).toEqual({ policyId: v1.id, blockedUntilUs: t + 60_000_000 });
    await store.override!('k', { base, blockForMs: null });
    for (let i = 0; i < 9; i++) expect(await store.step('k', stepArgs(policy, 1, 0, v0))).toEqual({ allowed: true, debtUnits: [(2 + i) * u], atUs: now * 1000 });
    expect(await store.step('k', stepArgs(policy, 1, 0, v0))).toEqual({ allowed: false, debtUnits: [10 * u], atUs: now * 1000 });
    expect(doc('k')!.ov).toEqual({ policyId: v1.id });
    // A node that sees v1 still (ended), or read no change before v1: the marker stays.
    await store.step('k', stepArgs(policy, 0, 0, v1));
    await store.step('k', stepArgs(policy, 0, 0, undefined, t - 1));
    expect(doc('k')!.ov).toEqual({ policyId: v1.id });
    // A change made after v1 replaces the marker.
    const v2: PolicyOverride = { id: `${t + 1000}.two#`, limits: five };
    expect(await store.step('k', stepArgs(policy, 0, 0, v2))).toMatchObject({ allowed: true, limits: five });
    expect(doc('k')!.ov).toEqual({ limits: five, policyId: v2.id });
  });
});

describe('mongodb store: a key\'s clear keeps a copy of a policy-wide change or a marker', () => {
  it('override with limits null and no policyId: a copy and a marker stay (nothing written), a key\'s own numbers go', async () => {
    const { store, doc, bytes } = fixture();
    const t = now * 1000;
    const v1: PolicyOverride = { id: `${t}.one#`, limits: five };
    await store.step('k', stepArgs(policy, 3, 0, v1));
    const held = bytes('k');
    expect(await store.override!('k', { base, limits: null })).toEqual({ atUs: t, before: { limits: five, policyId: v1.id }, after: { limits: five, policyId: v1.id } });
    expect(bytes('k')).toBe(held);
    // With a block set in the same call: the copy stays beside it.
    expect((await store.override!('k', { base, limits: null, blockForMs: 1000 })).after).toEqual({ limits: five, policyId: v1.id, blockedUntilUs: t + 1_000_000 });
    expect(doc('k')!.ov).toEqual({ limits: five, policyId: v1.id, blockedUntilUs: t + 1_000_000 });
    await store.step('m', stepArgs(policy, 3, 0, v1));
    await store.step('m', stepArgs(policy, 0, 0, undefined, t + 1));
    expect((await store.override!('m', { base, limits: null })).after).toEqual({ policyId: `${t + 1}.` });
    expect(doc('m')!.ov).toStrictEqual({ policyId: `${t + 1}.` });
    // A key's own numbers are cleared, the bucket carried back to the base.
    await store.override!('o', { base, limits: five });
    await store.step('o', stepArgs(policy, 3, 0));
    expect(await store.override!('o', { base, limits: null })).toEqual({ atUs: t, before: { limits: five } });
    expect(doc('o')!.ov).toBeUndefined();
  });
});

describe('mongodb store: a key\'s copy or marker is held policyHoldMs past the step that writes it', () => {
  it('a copy or marker left with a full bucket, or a bucket full sooner, expires no sooner than now + policyHoldMs; a plain key\'s expiry and pipeline are as without it', async () => {
    const { store, doc, collection } = fixture();
    const t = now * 1000;
    const hold = 7000;
    const v1: PolicyOverride = { id: `${t}.one#`, limits: five };
    // Installed by a peek: the bucket full, the copy held 7 s (without the hold: now, with the bucket).
    await store.step('k', stepArgs(policy, 0, 0, v1, undefined, hold));
    expect(doc('k')).toMatchObject({ ov: { limits: five, policyId: v1.id }, expiresAt: new Date(now + hold) });
    expect(doc('k')!.debt).toBeUndefined();
    now += 1000;
    // A take of 1 at 1 a second: full in 1 s, held 7.
    await store.step('k', stepArgs(policy, 1, 0, v1, undefined, hold));
    expect(doc('k')!.expiresAt).toEqual(new Date(now + hold));
    // A refund to full keeps the copy held.
    now += 100;
    await store.step('k', { ...adjustArgs(policy, -1, v1, undefined, hold) });
    expect(doc('k')).toMatchObject({ ov: { limits: five, policyId: v1.id }, expiresAt: new Date(now + hold) });
    expect(doc('k')!.debt).toBeUndefined();
    // The marker a later reading leaves (4 spent: full in 4 s) is held 7 s; a bucket full later than the hold wins.
    await store.step('k', stepArgs(policy, 4, 0, undefined, t + 1, hold));
    expect(doc('k')).toMatchObject({ ov: { policyId: `${t + 1}.` }, expiresAt: new Date(now + hold) });
    await store.step('k', stepArgs(policy, 5, 0, undefined, t + 1, hold));
    expect(doc('k')!.expiresAt).toEqual(new Date(now + 9000));
    // A plain key: one update of the plain pipeline, as without policyHoldMs, expiring with its bucket.
    const calls = collection.calls.length;
    await store.step('plain', stepArgs(policy, 1, 0, undefined, t, hold));
    const updates = collection.calls.slice(calls).filter((c) => c.method === 'findOneAndUpdate');
    expect(updates).toHaveLength(1);
    const callId = JSON.stringify(updates[0]!.args[1]).match(/"\$literal":"([^"]+)"/)![1]!;
    expect(updates[0]!.args[1]).toEqual(stepPipeline(stepArgs(policy, 1, 0, undefined, t), callId));
    expect(doc('plain')!.expiresAt).toEqual(new Date(now + 1000));
  });

  it('a policyHoldMs that is no whole ms from 0 to 86400000 is refused before any call', async () => {
    const { store, collection } = fixture();
    for (const bad of [1.5, -1, 86_400_001, Number.NaN, Infinity, '5' as unknown as number]) {
      await expect(store.step('k', { ...stepArgs(policy, 1, 0), policyHoldMs: bad })).rejects.toThrow(/policyHoldMs/);
    }
    expect(collection.calls).toEqual([]);
    await store.step('k', { ...stepArgs(policy, 1, 0), policyHoldMs: 86_400_000 });
  });
});

describe('mongodb store: a step\'s view of the policy-wide change', () => {
  it('policySeenUs on a key with no record: one update, the plain pipeline (as without it for none seen)', async () => {
    const { store, collection } = fixture();
    const args = stepArgs(policy, 1, 0, undefined, now * 1000 - 5000);
    expect(await store.step('k', args)).toEqual({ allowed: true, debtUnits: [u], atUs: now * 1000 });
    const updates = collection.calls.filter((c) => c.method === 'findOneAndUpdate');
    expect(updates).toHaveLength(1);
    const callId = JSON.stringify(updates[0]!.args[1]).match(/"\$literal":"([^"]+)"/)![1]!;
    // The plain pipeline, which reads the bucket no earlier than policySeenUs (a bucket written before
    // it refills nothing up to it); with none seen (0), the pipeline without a view.
    expect(updates[0]!.args[1]).toEqual(stepPipeline(args, callId));
    expect(stepPipeline(stepArgs(policy, 1, 0, undefined, 0), callId)).toEqual(stepPipeline(stepArgs(policy, 1, 0), callId));
  });

  it('a policySeenUs that is no whole µs of 0 or more, or a change with no string id, is refused (it would be written into a marker\'s id)', async () => {
    const { store, collection } = fixture();
    for (const bad of [1.5, -1, Number.NaN, '5' as unknown as number]) {
      await expect(store.step('k', { ...stepArgs(policy, 1, 0), policySeenUs: bad })).rejects.toThrow(StoreError);
    }
    await expect(store.step('k', { ...stepArgs(policy, 1, 0), policy: { id: 5 as unknown as string, limits: two } })).rejects.toThrow(/policySeenUs/);
    expect(collection.calls).toEqual([]);
  });
});

describe('mongodb store: a marker on a key goes with its bucket', () => {
  it('its document expires when the bucket is full (4 spent at 1 per second: 4 s), kept when a step leaves it, its block too', async () => {
    const { store, doc } = fixture();
    const t = now * 1000;
    const v1: PolicyOverride = { id: `${t}.one#`, limits: five };
    await store.step('k', stepArgs(policy, 3, 0, v1));
    await store.step('k', stepArgs(policy, 1, 0, undefined, t + 1));
    expect(doc('k')).toMatchObject({ ov: { policyId: `${t + 1}.` }, expiresAt: new Date(now + 4000) });
    now += 1000;
    await store.step('k', stepArgs(policy, 2, 0, undefined, t + 1));
    // (The key was last written at t, before the version it saw, t + 1: that µs refills nothing, so the
    // bucket is full 1 µs later, the expiry's ms rounded up.)
    expect(doc('k')).toMatchObject({ ov: { policyId: `${t + 1}.` }, expiresAt: new Date(now + 5001) });
    // A copy with a live block: the marker keeps the block, and the document stays until its end at least
    // (a take refused by the block takes nothing, and writes the marker all the same; an adjustment is
    // applied).
    await store.step('j', stepArgs(policy, 1, 0, v1));
    await store.override!('j', { base, blockForMs: 60_000 });
    expect(doc('j')!.ov).toEqual({ limits: five, policyId: v1.id, blockedUntilUs: now * 1000 + 60_000_000 });
    const debt = doc('j')!.debt;
    expect(await store.step('j', stepArgs(policy, 1, 0, undefined, t + 1))).toMatchObject({ allowed: false, blockedUntilUs: now * 1000 + 60_000_000 });
    expect(doc('j')).toMatchObject({ ov: { policyId: `${t + 1}.`, blockedUntilUs: now * 1000 + 60_000_000 }, expiresAt: new Date(now + 60_000), debt });
    await store.step('j', adjustArgs(policy, 1, undefined, t + 1));
    expect(doc('j')).toMatchObject({ ov: { policyId: `${t + 1}.`, blockedUntilUs: now * 1000 + 60_000_000 }, expiresAt: new Date(now + 60_000) });
  });
});

describe('mongodb store: Store.override versions a policy-wide change\'s id by the store clock', () => {
  it('two sets in one ms get increasing versions; a clear with a policyId leaves a marker with no expiresAt; a later ms its reading; a clock gone back the last + 1', async () => {
    const { store, doc } = fixture();
    const t = now * 1000;
    expect((await store.override!('p*', { base, limits: two, policyId: 'w1' })).after).toEqual({ limits: two, policyId: `${t}.0.0.w1` });
    expect((await store.override!('p*', { base, limits: five, policyId: 'w2' })).after).toEqual({ limits: five, policyId: `${t + 1}.${t}.${t + 1}.w2` });
    const cleared = await store.override!('p*', { base, limits: null, policyId: 'w3' });
    expect(cleared).toEqual({ atUs: t, before: { limits: five, policyId: `${t + 1}.${t}.${t + 1}.w2` }, after: { policyId: `${t + 2}.${t + 1}.${t + 2}.w3` } });
    expect(doc('p*')!.ov).toEqual({ policyId: `${t + 2}.${t + 1}.${t + 2}.w3` });
    expect(doc('p*')!.expiresAt).toBeUndefined();
    // Long after: the marker is still there (no expiry), and a set replaces it at the clock's reading.
    now += 90 * 24 * 3600 * 1000;
    expect((await store.override!('p*', { base })).after).toEqual({ policyId: `${t + 2}.${t + 1}.${t + 2}.w3` });
    expect((await store.override!('p*', { base, limits: two, forMs: 5000, policyId: 'w4' })).after).toEqual({ limits: two, untilUs: now * 1000 + 5_000_000, policyId: `${now * 1000}.${t + 2}.${t + 2}.w4` });
    // A change with an end is kept past it too: its version tells a node that read an older change
    // that this one was made and has ended (review 9, F1).
    expect(doc('p*')!.expiresAt).toBeUndefined();
    // A server whose clock is behind: still one above the last version.
    const last = now * 1000;
    now -= 3;
    expect((await store.override!('p*', { base, limits: null, policyId: 'w5' })).after).toEqual({ policyId: `${last + 1}.${last}.${last + 1}.w5` });
    expect(doc('p*')!.expiresAt).toBeUndefined();
    // A clear without a policyId (a key's own numbers) leaves the marker as it is.
    expect((await store.override!('p*', { base, limits: null })).after).toEqual({ policyId: `${last + 1}.${last}.${last + 1}.w5` });
    expect(doc('p*')!.expiresAt).toBeUndefined();
  });
});

describe('mongodb store: two nodes that disagree about a policy-wide change (separate stores on one collection)', () => {
  // As test/runtime-limits.test.ts does on the record store: 2 at 100 per second, the change 100 at one
  // an hour; the key stepped by both nodes in turn while only one has read the change or its revert.
  const SLOW = 1 / 3600;
  function node() {
    const collection = shared;
    const clock = { ms: 0 };
    const limiter = createLimiter({ store: mongoStore({ collection }), policies: { fast: { capacity: 2, refillPerSecond: 100 } }, monotonicMs: () => clock.ms, policyRefreshMs: 10_000 });
    return { limiter, clock };
  }
  let shared: MingoCollection;
  beforeEach(() => {
    shared = new MingoCollection();
  });
  async function alternate(a: ReturnType<typeof node>, b: ReturnType<typeof node>, ms: number) {
    const limits = { a: new Set<number>(), b: new Set<number>() };
    let allowed = 0;
    for (let i = 0; i < ms; i++) {
      now += 1;
      a.clock.ms += 1;
      b.clock.ms += 1;
      const n = i % 2 === 0 ? a : b;
      const d = await n.limiter.take('fast', 'k');
      limits[n === a ? 'a' : 'b'].add(d.limit);
      if (d.allowed) allowed++;
    }
    return { allowed, limits };
  }

  it('a change read by one node only: the other decides under the key\'s copy; at most the change\'s 100 in 200 ms', async () => {
    const [a, b] = [node(), node()];
    await a.limiter.take('fast', 'warm');
    await b.limiter.take('fast', 'warm');
    now += 1;
    await a.limiter.setPolicyLimits('fast', { capacity: 100, refillPerSecond: SLOW });
    const { allowed, limits } = await alternate(a, b, 200);
    expect(limits).toEqual({ a: new Set([100]), b: new Set([100]) });
    expect(allowed).toBe(100);
  }, 60_000);

  it('a revert read by one node only: its marker stops the other installing the change again; at most the policy\'s 2 + 20 in 200 ms', async () => {
    const [a, b] = [node(), node()];
    await a.limiter.setPolicyLimits('fast', { capacity: 100, refillPerSecond: SLOW });
    await b.limiter.take('fast', 'warm');
    expect((await b.limiter.peek('fast', 'k')).limit).toBe(100);
    now += 1;
    await a.limiter.clearPolicyLimits('fast');
    const { allowed, limits } = await alternate(a, b, 200);
    expect(limits).toEqual({ a: new Set([2]), b: new Set([2]) });
    // 2 at once, then one each 10 ms.
    expect(allowed).toBeLessThanOrEqual(2 + 20);
    expect(allowed).toBeGreaterThanOrEqual(20);
    // The policy's record is the pinned marker of the revert; the key's a marker that goes with its bucket.
    const doc = (suffix: string) => shared.docs.find((d) => d._id.endsWith(suffix))!;
    // (toEqual: mingo keeps a field an object expression set to $$REMOVE, as undefined.)
    expect(doc('fast*').ov).toEqual({ policyId: expect.stringMatching(/^\d+\.[^#]+#$/) });
    expect(doc('fast*').expiresAt).toBeUndefined();
    expect(doc('fast:k').ov).toEqual({ policyId: expect.stringMatching(/^\d+\.$/) });
    expect(doc('fast:k').expiresAt).toBeInstanceOf(Date);
  }, 60_000);
});
