// The conformance suite's cases for limits changed at runtime (issue 31), run by storeConformance against
// every store through the Store interface itself (Store.override, Store.step with the limiter's step
// arguments, Store.reset): numbers raised and lowered mid-debt, another rate mid-debt, one limit of
// several, the end of an override in both directions, a block and an unblock, a record that outlives the
// bucket key's expiry, and setters and takers at once. Time is real (a store's clock cannot be faked), so
// each timing assertion brackets the store's elapsed time between client-side readings around the calls.
// A store without override() skips them, saying so.
import { expect, it, type TestContext } from 'vitest';
import { adjustArgs, grantArgs, refundArgs, settleArgs, SETTLE_OP, stepArgs, toDecision, toPeekDecision, type Costs, type StepArgs } from '../../src/core/gcra.js';
import { baseNumbers, changeVersion, policyUnder, priorOf } from '../../src/core/override.js';
import { resolvePolicy, type PolicyConfig, type ResolvedPolicy } from '../../src/core/policy.js';
import type { OverrideArgs, OverrideLimit, Store } from '../../src/store.js';

/** What the cases need of the suite: the store (made on first use), its storage key prefix, a fresh key, and the store's expiry of a key. */
export interface OverrideSuite {
  store(): Promise<Store>;
  prefix: string;
  key(): string;
  expiryMs?(storageKey: string): Promise<number | null>;
  clockResolutionMs: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function sleepUntil(t: number): Promise<void> {
  while (performance.now() < t) await sleep(Math.max(1, Math.ceil(t - performance.now())));
}

const resolved = (config: PolicyConfig, name = 'p'): ResolvedPolicy => resolvePolicy(name, config, { onStoreError: 'deny', timeoutMs: 1000 });
/** A limit config's numbers, as an override holds them. */
const numbers = (config: PolicyConfig): OverrideLimit[] => baseNumbers(resolved(config));

// Rates slow enough that no token comes back within a test, unless the test waits for one.
const SLOW = 1 / 600;
const POLICIES = {
  hundred: { capacity: 100, refillPerSecond: SLOW },
  ten: { capacity: 10, refillPerSecond: SLOW },
  tenFast: { capacity: 10, refillPerSecond: 1000 },
  tenThird: { capacity: 10, refillPerSecond: 1 / 3 },
  five: { capacity: 5, refillPerSecond: SLOW },
  fiveTen: { capacity: 5, refillPerSecond: 10 },
  twentyTen: { capacity: 20, refillPerSecond: 10 },
  pair: { limits: { burst: { capacity: 3, refillPerSecond: SLOW }, daily: { capacity: 50, refillPerSecond: 50 / 86_400 } } },
} satisfies Record<string, PolicyConfig>;
type Name = keyof typeof POLICIES;

export function overrideConformance(suite: OverrideSuite): void {
  const policies = Object.fromEntries(Object.entries(POLICIES).map(([name, config]) => [name, resolved(config, name)])) as Record<Name, ResolvedPolicy>;
  const res = suite.clockResolutionMs;

  /** The store, or a visible skip when it cannot hold records. */
  async function storeFor(ctx: TestContext): Promise<Store & { override: NonNullable<Store['override']> }> {
    const store = await suite.store();
    if (!store.override) ctx.skip(`${store.name} has no override(): it cannot hold override records yet`);
    return store as Store & { override: NonNullable<Store['override']> };
  }
  const storageKey = (name: Name, k: string) => `${suite.prefix}${name}:${k}`;

  /** One take (costs 0: a peek) on the store, and its decision under the numbers it reports in force. */
  async function take(store: Store, name: Name, k: string, costs: Costs = 1, maxWaitMs = 0) {
    const p = policies[name];
    const r = await store.step(storageKey(name, k), stepArgs(p, costs, maxWaitMs));
    return { r, d: toDecision(r.limits ? policyUnder(p, r.limits) : p, costs, r) };
  }
  const set = (store: Store, name: Name, k: string, limits: OverrideLimit[] | null, forMs?: number) =>
    store.override!(storageKey(name, k), { base: baseNumbers(policies[name]), limits, ...(forMs === undefined ? {} : { forMs }) });
  const block = (store: Store, name: Name, k: string, forMs: number | null) => store.override!(storageKey(name, k), { base: baseNumbers(policies[name]), blockForMs: forMs });

  it('overrides: lowering capacity mid-debt keeps the tokens spent (90 of 100 moved to 50: none left); raising it keeps the whole debt (90, not 50) and adds the headroom; clearing goes back', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    expect((await take(store, 'hundred', k, 90)).d).toMatchObject({ allowed: true, remaining: 10 });
    const fifty = numbers({ capacity: 50, refillPerSecond: SLOW });
    expect((await set(store, 'hundred', k, fifty)).after).toEqual({ limits: fifty });
    const refused = await take(store, 'hundred', k);
    expect(refused.r.limits).toEqual(fifty);
    expect(refused.d).toMatchObject({ allowed: false, limit: 50, remaining: 0 });
    // Raised: the 90 spent under 50 are still spent (cutting them to 50 gave 40 back), so 910 left.
    const thousand = numbers({ capacity: 1000, refillPerSecond: SLOW });
    await set(store, 'hundred', k, thousand);
    expect((await take(store, 'hundred', k, 0)).d).toMatchObject({ limit: 1000, remaining: 910 });
    expect((await take(store, 'hundred', k, 100)).d).toMatchObject({ allowed: true, limit: 1000, remaining: 810 });
    // Back to the policy's numbers: 190 spent of 100, carried whole: none left.
    expect((await set(store, 'hundred', k, null)).after).toBeUndefined();
    const back = await take(store, 'hundred', k, 0);
    expect(back.r.limits).toBeUndefined();
    expect(back.d).toMatchObject({ limit: 100, remaining: 0 });
    // And raised again: the trip through the lower numbers gave nothing back.
    await set(store, 'hundred', k, thousand);
    expect((await take(store, 'hundred', k, 0)).d).toMatchObject({ limit: 1000, remaining: 810 });
  });

  it('overrides: changing the rate mid-debt refills at the new rate from the change, and a slower one keeps the debt, rounded against the caller', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    expect((await take(store, 'ten', k, 10)).d).toMatchObject({ allowed: true, remaining: 0 });
    // 1000/s: the 10 tokens spent come back within 10 ms of the change.
    await set(store, 'ten', k, numbers({ capacity: 10, refillPerSecond: 1000 }));
    await sleep(20 + res);
    expect((await take(store, 'ten', k, 0)).d).toMatchObject({ limit: 10, remaining: 10 });
    // Between scales where neither divides the other (a token of 1/3 per s is 3e6 units, of 1/2 per s
    // 2e6) the debt is carried in whole tokens, rounded up: 10 spent at 1/3 per s, a sliver refilled,
    // moved to 1/2 per s is 10 spent, and the next token is a whole 2 s away (rounded down it would be
    // there at once).
    const k2 = suite.key();
    await take(store, 'tenThird', k2, 10);
    const t0 = performance.now();
    await set(store, 'tenThird', k2, numbers({ capacity: 10, refillPerSecond: 1 / 2 }));
    const next = await take(store, 'tenThird', k2, 1);
    expect(next.d).toMatchObject({ allowed: false, limit: 10, remaining: 0 });
    expect(next.d.retryAfterMs).toBeLessThanOrEqual(2000);
    expect(next.d.retryAfterMs).toBeGreaterThanOrEqual(2000 - Math.ceil(performance.now() - t0 + res));
  });

  it('overrides: one limit of a policy with several (the others keep the policy’s numbers)', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    expect((await take(store, 'pair', k, [3, 10])).d).toMatchObject({ allowed: true });
    const base = baseNumbers(policies.pair);
    const wider = [numbers({ capacity: 8, refillPerSecond: SLOW })[0]!, base[1]!];
    await set(store, 'pair', k, wider);
    const { r, d } = await take(store, 'pair', k, [5, 1]);
    expect(r.limits).toEqual(wider);
    expect(d.allowed).toBe(true);
    expect(d.limits?.map((l) => [l.name, l.limit, l.remaining])).toEqual([
      ['burst', 8, 0],
      ['daily', 50, 39],
    ]);
    // Only the burst limit changed: the daily one still refuses beyond its 50.
    expect((await take(store, 'pair', k, [0, 40])).d).toMatchObject({ allowed: false });
    expect((await take(store, 'pair', k, [0, 39])).d).toMatchObject({ allowed: true });
  });

  it('overrides: a generous override that ends leaves no refill at its rate after its end', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    // The policy refills 1 token per 600 s; the override 5 per second (one per 200 ms), for 300 ms.
    const t0 = performance.now();
    await set(store, 'five', k, numbers({ capacity: 5, refillPerSecond: 5 }), 300);
    const t1 = performance.now();
    await take(store, 'five', k, 5);
    const t2 = performance.now();
    // From the take to the end: between (t0 + 300) - t2 and (t1 + 300) - t1 ms of refill at 5/s.
    await sleepUntil(t1 + 300 + 200);
    const after = await take(store, 'five', k, 0);
    expect(after.r.limits).toBeUndefined();
    expect(after.d.limit).toBe(5);
    const lo = Math.floor(((t0 + 300 - t2 - res) * 5) / 1000);
    const hi = Math.floor(((t1 + 300 - t1 + res) * 5) / 1000);
    expect(after.d.remaining).toBeGreaterThanOrEqual(Math.max(0, lo));
    expect(after.d.remaining).toBeLessThanOrEqual(hi);
    // And no more comes back at the generous rate.
    await sleep(400);
    expect((await take(store, 'five', k, 0)).d.remaining).toBe(after.d.remaining);
  });

  it('overrides: a strict override that ends refills at the policy’s rate from its end, not before', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    // The policy refills 10 per second; the override 1 per 600 s, for 1000 ms.
    const t0 = performance.now();
    const until = (await set(store, 'fiveTen', k, numbers({ capacity: 5, refillPerSecond: SLOW }), 1000)).after!.untilUs!;
    const t1 = performance.now();
    expect((await take(store, 'fiveTen', k, 5)).d).toMatchObject({ allowed: true, limit: 5, remaining: 0 });
    await sleep(200);
    const during = await take(store, 'fiveTen', k, 0);
    // Before its end nothing comes back (at 10/s, 2 tokens would have); at its end the policy's numbers.
    if (during.r.atUs! < until) expect(during).toMatchObject({ r: { limits: numbers({ capacity: 5, refillPerSecond: SLOW }) }, d: { remaining: 0 } });
    else expect(during.r.limits).toBeUndefined();
    await sleepUntil(t1 + 1000 + 250);
    const t3 = performance.now();
    const after = await take(store, 'fiveTen', k, 0);
    const t4 = performance.now();
    expect(after.r.limits).toBeUndefined();
    // The end is between t0 + 1000 and t1 + 1000 of the store's time: 1 token per 100 ms since.
    expect(after.d.remaining).toBeGreaterThanOrEqual(Math.min(5, Math.floor((t3 - t1 - 1000 - res) / 100)));
    expect(after.d.remaining).toBeLessThanOrEqual(Math.min(5, Math.ceil((t4 - t0 - 1000 + res) / 100)));
  });

  it('overrides: a key’s own numbers that end while a policy-wide change is in force hand the bucket to the change at their end, not to the policy’s own numbers, and the key is kept until then', async (ctx) => {
    const store = await storeFor(ctx);
    const p = policies.tenFast;
    // The policy refills 10 tokens in 10 ms; a change made now (version: this reading) holds it to 10
    // per 6000 s, and each key's own numbers, the same, end 300 ms after they are set. Key a: numbers
    // set, then 10 taken under them; key b: 10 taken under the change, then numbers set (written by the
    // override, not a step).
    const [a, b, c, d] = [suite.key(), suite.key(), suite.key(), suite.key()];
    const { slow, decide } = await slowChange(store, a);
    expect((await decide(b, 10)).d).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    const untilB = (await set(store, 'tenFast', b, slow, 300)).after!.untilUs!;
    const untilA = (await set(store, 'tenFast', a, slow, 300)).after!.untilUs!;
    const untilC = (await set(store, 'tenFast', c, slow, 300)).after!.untilUs!;
    // Key d's own numbers refill 10 a second: faster than the change, slower than the policy's.
    const untilD = (await set(store, 'tenFast', d, numbers({ capacity: 10, refillPerSecond: 10 }), 300)).after!.untilUs!;
    // Under key a's own numbers (they win over the change while they last): all 10; key c the same.
    const first = await decide(a, 10);
    expect(first.r.atUs!).toBeLessThan(untilA);
    expect(first.d).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    expect((await decide(c, 10)).d).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    // Key d: about 7 still spent at their end, carried to the change: kept until full under it (under
    // its own numbers it was full 1 s after the take, under the policy's 7 ms after the end).
    expect((await decide(d, 10)).d).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    // 1000 ms after their end (past a store's shortest expiry of a key, 1 s at Redis): the change has
    // been in force for each key since then, and nothing has come back at 1 token per 600 s, where the
    // policy's own numbers refill all 10 in 10 ms.
    await sleep(1300);
    // Key c is read after the end (getLimits: Store.override with nothing to change), which writes
    // nothing: the step after it carries the bucket past the end under its view.
    expect((await store.override(storageKey('tenFast', c), { base: baseNumbers(p) })).after).toBeUndefined();
    const laterD = await decide(d, 10);
    expect(laterD.r.atUs!).toBeGreaterThan(untilD + 900_000);
    expect(laterD.r.limits).toEqual(slow);
    // At most 3 came back at 10 a second in the under 300 ms from the take to the end, none since (the
    // key was not let go: gone, it would have come back full).
    expect(laterD.d).toMatchObject({ allowed: false, limit: 10 });
    expect(laterD.d.remaining).toBeLessThanOrEqual(3);
    for (const [k, until] of [[a, untilA], [b, untilB], [c, untilC]] as const) {
      const later = await decide(k, 10);
      expect(later.r.atUs!).toBeGreaterThan(until + 900_000);
      expect(later.r.limits).toEqual(slow);
      expect(later.d).toMatchObject({ allowed: false, limit: 10, remaining: 0 });
      expect((await decide(k, 1)).d.allowed).toBe(false);
    }
  });

  it('overrides: a key’s own numbers that end with its bucket still spent keep the key until its next step, so that a policy-wide change made after its last step, before their end, takes it at their end (N1)', async (ctx) => {
    const store = await storeFor(ctx);
    const p = policies.tenFast;
    const k = suite.key();
    // The key's own 10 a second end 300 ms after they are set; 10 taken under them by a node with no view
    // of any change: at their end about 7 are still spent, which the policy's 1,000 a second refill in 7 ms.
    const until = (await set(store, 'tenFast', k, numbers({ capacity: 10, refillPerSecond: 10 }), 300)).after!.untilUs!;
    const first = await take(store, 'tenFast', k, 10);
    expect(first.d).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    // The store keeps the key until its next step: none of the known numbers tells how long it is spent.
    if (suite.expiryMs) expect(await suite.expiryMs(storageKey('tenFast', k))).toBeNull();
    // A policy-wide change to 10 per 6000 s made after that take (its version a later store reading),
    // before their end; then nothing steps the key until past the end and a store's shortest expiry.
    const { change, decide } = await slowChange(store, suite.key());
    expect(Number(change.id.split('.')[0])).toBeGreaterThan(first.r.atUs!);
    expect(Number(change.id.split('.')[0])).toBeLessThan(until);
    await sleep(1300);
    const later = await decide(k, 10);
    expect(later.r.atUs!).toBeGreaterThan(until + 900_000);
    // In the change since their end: at most 3 came back before it at 10 a second, none since (let go,
    // the key would have come back full: 10 admitted).
    expect(later.r.limits).toEqual(numbers({ capacity: 10, refillPerSecond: SLOW }));
    expect(later.d).toMatchObject({ allowed: false, limit: 10 });
    expect(later.d.remaining).toBeLessThanOrEqual(3);
    // That step saw the change: the key goes when full under it (the change's hold, or its full time).
    if (suite.expiryMs) expect(await suite.expiryMs(storageKey('tenFast', k))).not.toBeNull();
  });

  it('overrides: a policy-wide change made while a key is blocked reaches it at its next step, one the block refuses too: the bucket is carried to the change then, not refilled under the policy’s numbers until the block ends', async (ctx) => {
    const store = await storeFor(ctx);
    const p = policies.fiveTen;
    const k = suite.key();
    // 5 spent under the policy's 10 a second (full again in 500 ms), then a block of 300 ms.
    expect((await take(store, 'fiveTen', k, 5)).d).toMatchObject({ allowed: true, remaining: 0 });
    await block(store, 'fiveTen', k, 300);
    // A change to 5 per 600 s, made now (its version a store reading), and a peek under it: refused by
    // the block, it carries the bucket (about 4.5 still spent) to the change.
    const made = (await store.step(storageKey('fiveTen', suite.key()), stepArgs(p, 0, 0))).atUs!;
    const slow = numbers({ capacity: 5, refillPerSecond: SLOW });
    const change = { id: `${made}.incident`, limits: slow };
    const peek = await store.step(storageKey('fiveTen', k), stepArgs(p, 0, 0, change));
    expect(peek).toMatchObject({ allowed: false, limits: slow });
    expect(peek.blockedUntilUs).toBeGreaterThan(peek.atUs!);
    // Past the block (and past the 500 ms in which the policy's numbers would have refilled all 5).
    await sleep(600);
    const r = await store.step(storageKey('fiveTen', k), stepArgs(p, 1, 0, change));
    expect(r.blockedUntilUs).toBeUndefined();
    expect(r.limits).toEqual(slow);
    // Still spent: nothing comes back at 5 per 600 s (the block's peek not written: all 5 back).
    expect(toDecision(policyUnder(p, slow), 1, r)).toMatchObject({ allowed: false, limit: 5, remaining: 0 });
  });

  it('overrides: the policy-wide change itself, with an end, is kept past it: its version tells a node that read an older change that it was replaced and has ended (review 9, F1)', async (ctx) => {
    const store = await storeFor(ctx);
    const base = baseNumbers(policies.tenFast);
    // The policy's own key, as the limiter names it (policy names hold no '*').
    const key = `${suite.prefix}wide-${suite.key()}*`;
    const older = await store.override(key, { base, limits: numbers({ capacity: 10, refillPerSecond: 10 }), policyId: 'older#' });
    const newer = await store.override(key, { base, limits: numbers({ capacity: 2, refillPerSecond: SLOW }), policyId: 'newer#', forMs: 300 });
    expect(changeVersion(newer.after!.policyId)).toBeGreaterThan(changeVersion(older.after!.policyId));
    if (suite.expiryMs) expect(await suite.expiryMs(key)).toBeNull();
    // Past its end and a store's shortest expiry: a reading (Store.override with nothing to change)
    // still finds the newer version, ended, so a node holding the older change lets it go.
    await sleep(1300);
    const read = await store.override(key, { base });
    expect(changeVersion(read.after?.policyId)).toBe(changeVersion(newer.after!.policyId));
    // (Its numbers, if still there, have ended.)
    expect(read.after?.limits === undefined || (read.after.untilUs !== undefined && read.after.untilUs <= read.atUs)).toBe(true);
  });

  it('overrides: a key’s copy of a policy-wide change that ends, its bucket still spent at the end, keeps the key until its next step, so that a change made before that end takes it then (late-copy)', async (ctx) => {
    const store = await storeFor(ctx);
    const p = policies.tenFast;
    const k = suite.key();
    // A change to 10 a second for 300 ms, and 10 taken under it: about 7 still spent at its end.
    const madeA = (await store.step(storageKey('tenFast', suite.key()), stepArgs(p, 0, 0))).atUs!;
    const a = { id: `${madeA}.a`, limits: numbers({ capacity: 10, refillPerSecond: 10 }), untilUs: madeA + 300_000 };
    const first = await store.step(storageKey('tenFast', k), stepArgs(p, 10, 0, a));
    expect(toDecision(policyUnder(p, first.limits!), 10, first)).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    // Kept until its next step: from the change's end the key is in whatever change is in force then.
    if (suite.expiryMs) expect(await suite.expiryMs(storageKey('tenFast', k))).toBeNull();
    // Replaced before its end by 10 per 6000 s; nothing steps the key until past the end and a store's
    // shortest expiry (the policy's own numbers refill all 10 in 10 ms).
    const madeB = (await store.step(storageKey('tenFast', suite.key()), stepArgs(p, 0, 0))).atUs!;
    expect(madeB).toBeLessThan(a.untilUs);
    const slow = numbers({ capacity: 10, refillPerSecond: SLOW });
    const b = { id: `${madeB}.b`, limits: slow };
    await sleep(1300);
    const later = await store.step(storageKey('tenFast', k), stepArgs(p, 10, 0, b));
    expect(later.atUs!).toBeGreaterThan(a.untilUs + 900_000);
    expect(later.limits).toEqual(slow);
    // Let go, the key would have come back full (10 admitted); at most 3 came back under the first change.
    const d = toDecision(policyUnder(p, slow), 10, later);
    expect(d).toMatchObject({ allowed: false, limit: 10 });
    expect(d.remaining).toBeLessThanOrEqual(3);
  });

  it('overrides: a policy-wide change counts from when it was made where that leaves fewer tokens: reservations granted before it and due before the key’s next step count under it (F5)', async (ctx) => {
    const store = await storeFor(ctx);
    const p = policies.fiveTen;
    const k = suite.key();
    // 5 taken and 5 reserved under the policy's 10 a second (the last due about 500 ms on).
    expect((await take(store, 'fiveTen', k, 5)).d).toMatchObject({ allowed: true, remaining: 0 });
    for (let i = 0; i < 5; i++) expect((await take(store, 'fiveTen', k, 1, 1000)).d.allowed).toBe(true);
    // A change to 5 per 600 s, made now (its version a store reading); nothing steps the key until past
    // the reservations' slots, when the policy's numbers have refilled all 5.
    const made = (await store.step(storageKey('fiveTen', suite.key()), stepArgs(p, 0, 0))).atUs!;
    const slow = numbers({ capacity: 5, refillPerSecond: SLOW });
    const change = { id: `${made}.incident`, limits: slow };
    await sleep(900);
    const later = await store.step(storageKey('fiveTen', k), stepArgs(p, 1, 0, change));
    expect(later.limits).toEqual(slow);
    // The 5 reserved came after the change, under it: nothing more at 5 per 600 s (the change counted
    // from this step: all 5 back).
    expect(toDecision(policyUnder(p, slow), 1, later)).toMatchObject({ allowed: false, limit: 5, remaining: 0 });
  });

  it('overrides: a key’s own numbers that end under a change replaced before its next step refill nothing between their end and the change it sees (what was in force there is unknown to the step)', async (ctx) => {
    const store = await storeFor(ctx);
    const p = policies.tenFast;
    const k = suite.key();
    // The key's own 10 a second for 300 ms, and 10 taken under them: about 7 still spent at their end.
    const until = (await set(store, 'tenFast', k, numbers({ capacity: 10, refillPerSecond: 10 }), 300)).after!.untilUs!;
    expect((await take(store, 'tenFast', k, 10)).d).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    // A change to 10 per 6000 s before their end, replaced after it by another (the same numbers), with
    // no step on the key between: a step sees only the second, made after the end.
    await slowChange(store, suite.key());
    await sleep(Math.max(0, (until - (await store.step(storageKey('tenFast', suite.key()), stepArgs(p, 0, 0))).atUs!) / 1000) + 400);
    const { slow, change, decide } = await slowChange(store, suite.key());
    expect(changeVersion(change.id)).toBeGreaterThan(until);
    await sleep(200);
    const later = await decide(k, 10);
    expect(later.r.limits).toEqual(slow);
    // The policy's own numbers from the end would have refilled all 10 (10 admitted); at most 3 came
    // back before it.
    expect(later.d).toMatchObject({ allowed: false, limit: 10 });
    expect(later.d.remaining).toBeLessThanOrEqual(3);
  });

  /** The store, and twentyTen's numbers: its own, 20 per 600 s, its refill in units a µs and 20 tokens in units. */
  async function twentyTen(ctx: TestContext) {
    const p = policies.twentyTen;
    return { store: await storeFor(ctx), p, base: baseNumbers(p), slow: numbers({ capacity: 20, refillPerSecond: SLOW }), rate: p.limits[0]!.refillUnitsPerUs, spent: 20 * p.limits[0]!.tokenUnits };
  }

  it('overrides: a policy-wide change made and replaced, reverted or ended while a key is idle reaches it: the step that sees what came after refills nothing from the key’s last step to then (each change’s id names the version it replaced, and since when the policy’s own numbers were in force)', async (ctx) => {
    const { store, p, base, slow, rate, spent } = await twentyTen(ctx);
    for (const how of ['replaced', 'reverted', 'ended', 'copy reverted'] as const) {
      const k = suite.key();
      // The policy's record (one per variant), changed through Store.override as setPolicyLimits does.
      const policyKey = storageKey('twentyTen', `*${k}`);
      // All 20 taken under the policy's 10 a second (full again in 2 s, when a store may let the key go),
      // or, 'copy reverted', under a change to the same numbers, whose copy the key then holds; a change to
      // 10 per 600 s 50 ms on, and 250 ms on it is replaced by the same numbers, or reverted, or it ends;
      // no step on the key in between.
      if (how === 'copy reverted') {
        const id = (await store.override(policyKey, { base, limits: base, policyId: 'c0#' })).after!.policyId!;
        const r = await store.step(storageKey('twentyTen', k), stepArgs(p, 20, 0, { id, limits: base }));
        expect({ allowed: r.allowed, limits: r.limits }).toEqual({ allowed: true, limits: base });
      } else expect((await take(store, 'twentyTen', k, 20)).d).toMatchObject({ allowed: true, remaining: 0 });
      await sleep(50);
      const first = (await store.override(policyKey, { base, limits: slow, policyId: 'c1#', ...(how === 'ended' ? { forMs: 250 } : {}) })).after!;
      await sleep(250 + res);
      let args: StepArgs;
      let fromUs: number;
      if (how === 'ended') {
        args = stepArgs(p, 0, 0, { id: first.policyId!, limits: slow, untilUs: first.untilUs! });
        fromUs = first.untilUs!;
      } else {
        // (Replaced by the same numbers for other limits' names: the same numbers for the same limits would change nothing.)
        const id = (how === 'replaced' ? await store.override(policyKey, { base, limits: slow, policyId: 'c2#twentyTen' }) : await store.override(policyKey, { base, limits: null, policyId: 'r#' })).after!.policyId!;
        expect(priorOf(id)?.[0]).toBe(changeVersion(first.policyId));
        args = how === 'replaced' ? stepArgs(p, 1, 0, { id, limits: slow }) : stepArgs(p, 0, 0, undefined, changeVersion(id));
        fromUs = changeVersion(id);
      }
      const r = await store.step(storageKey('twentyTen', k), args);
      // The policy's own numbers (or the first change's) from the take would have refilled 3 by then (3
      // admitted): nothing came back before the second change (under its 20 per 600 s, none since), or
      // before the revert or the end (under the policy's numbers since them).
      if (how === 'replaced') expect({ how, allowed: r.allowed, limits: r.limits }).toEqual({ how, allowed: false, limits: slow });
      else expect({ how, debt: r.debtUnits[0] }).toEqual({ how, debt: Math.max(0, spent - (r.atUs! - fromUs) * rate) });
    }
  });

  it('overrides: a key’s copy of a change with an end, replaced or reverted before that end while the key is idle, refills at the change’s rate only until it was replaced (review 12, F1: it did until the end)', async (ctx) => {
    const { store, p, base, slow, rate, spent } = await twentyTen(ctx);
    for (const how of ['replaced', 'reverted'] as const) {
      const k = suite.key();
      const policyKey = storageKey('twentyTen', `*${k}`);
      // A change to the policy's own numbers for 500 ms; all 20 taken under it (the key holds its copy);
      // 50 ms on it is replaced by 20 per 600 s, or reverted; the next step comes after its end.
      const first = (await store.override(policyKey, { base, limits: base, forMs: 500, policyId: 'c0#' })).after!;
      const c0 = { id: first.policyId!, limits: base, untilUs: first.untilUs! };
      expect((await store.step(storageKey('twentyTen', k), stepArgs(p, 20, 0, c0))).allowed).toBe(true);
      await sleep(50);
      const id = (how === 'replaced' ? await store.override(policyKey, { base, limits: slow, policyId: 'c1#' }) : await store.override(policyKey, { base, limits: null, policyId: 'r#' })).after!.policyId!;
      await sleepUntil(performance.now() + Math.max(0, (first.untilUs! - changeVersion(id)) / 1000) + 100 + res);
      const r = await store.step(storageKey('twentyTen', k), how === 'replaced' ? stepArgs(p, 1, 0, { id, limits: slow }) : stepArgs(p, 0, 0, undefined, changeVersion(id)));
      // Until its end the change's 10 a second would have refilled 5 (5 admitted); replaced, it refilled
      // about 0.5 before the replacement and none since; reverted, none from the take to the revert (the
      // step cannot tell which change the revert replaced) and the policy's since.
      if (how === 'replaced') expect({ how, allowed: r.allowed, limits: r.limits }).toEqual({ how, allowed: false, limits: slow });
      else expect({ how, debt: r.debtUnits[0] }).toEqual({ how, debt: Math.max(0, spent - (r.atUs! - changeVersion(id)) * rate) });
    }
  });

  it('overrides: a policy-wide call that changes nothing writes nothing, in the same atomic step (review 13, N1): the same numbers again, a revert of a revert or of an ended change; a revert with no record at all writes its marker', async (ctx) => {
    const { store, base, slow } = await twentyTen(ctx);
    const policyKey = storageKey('twentyTen', `*${suite.key()}`);
    const id = async (args: Omit<OverrideArgs, 'base'>) => (await store.override(policyKey, { base, ...args })).after?.policyId;
    const marker = await id({ limits: null, policyId: 'r0#' });
    expect(priorOf(marker)).toEqual([0, 0]);
    expect(await id({ limits: null, policyId: 'r1#' })).toBe(marker);
    const change = await id({ limits: slow, policyId: 'c#twentyTen' });
    expect(changeVersion(change)).toBeGreaterThan(changeVersion(marker));
    expect(await id({ limits: slow, policyId: 'c2#twentyTen' })).toBe(change);
    // Other limits' names, other numbers, or an end: a new version.
    expect(changeVersion(await id({ limits: slow, policyId: 'c3#other' }))).toBeGreaterThan(changeVersion(change));
    const ending = (await store.override(policyKey, { base, limits: base, forMs: 50, policyId: 'e#twentyTen' })).after!;
    await sleep(60 + res);
    const ended = (await store.override(policyKey, { base })).stored;
    expect(ended?.policyId).toBe(ending.policyId);
    await store.override(policyKey, { base, limits: null, policyId: 'r2#' });
    expect((await store.override(policyKey, { base })).stored).toEqual(ended);
  });

  /** A policy-wide change of tenFast's numbers to 10 per 6000 s, made at the store's reading now (its version), and a take under it. */
  async function slowChange(store: Store, k: string) {
    const p = policies.tenFast;
    const made = (await store.step(storageKey('tenFast', k), stepArgs(p, 0, 0))).atUs!;
    const slow = numbers({ capacity: 10, refillPerSecond: SLOW });
    const change = { id: `${made}.incident`, limits: slow };
    const decide = async (key: string, costs: number) => {
      const r = await store.step(storageKey('tenFast', key), stepArgs(p, costs, 0, change));
      return { r, d: toDecision(r.limits ? policyUnder(p, r.limits) : p, costs, r) };
    };
    // Store.override on a key with this node's view of the change, as the limiter sends it.
    const viewed = (key: string, args: Omit<OverrideArgs, 'base'>) => store.override!(storageKey('tenFast', key), { base: baseNumbers(p), policy: change, ...args });
    return { slow, change, decide, viewed };
  }

  it('overrides: a key’s numbers cleared while a policy-wide change is in force carry its bucket to the change, not to the policy’s own numbers (review 3, F1)', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    const { slow, change, decide, viewed } = await slowChange(store, k);
    // The key's own numbers are the change's: 10 taken under them.
    await viewed(k, { limits: slow });
    expect((await decide(k, 10)).d).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    // Cleared with the view: the key is in the change now, its 10 still spent. The policy's own numbers
    // refill all 10 in 10 ms; the change, none in 6000 s.
    const cleared = await viewed(k, { limits: null });
    await sleep(60);
    const later = await decide(k, 1);
    expect(later.r.limits).toEqual(slow);
    expect(later.d).toMatchObject({ allowed: false, limit: 10, remaining: 0 });
    // The change's copy was installed by the clear itself.
    expect(cleared.after).toEqual({ limits: slow, policyId: change.id });
  });

  it('overrides: a block and an unblock, a clear, or numbers set after a key’s own numbers ended under a policy-wide change carry its bucket to the change at their end, not past it to the policy’s own numbers (review 3, F2)', async (ctx) => {
    const store = await storeFor(ctx);
    const [a, b, c] = [suite.key(), suite.key(), suite.key()];
    const { slow, decide, viewed } = await slowChange(store, a);
    // Each key's own numbers, the change's, end 300 ms after they are set: 10 taken under them.
    for (const k of [a, b, c]) {
      await viewed(k, { limits: slow, forMs: 300 });
      expect((await decide(k, 10)).d).toMatchObject({ allowed: true, limit: 10, remaining: 0 });
    }
    await sleep(450);
    // After their end, not yet stepped: key a blocked and unblocked, key b cleared, key c set to the change's numbers.
    await viewed(a, { blockForMs: 60_000 });
    await viewed(a, { blockForMs: null });
    await viewed(b, { limits: null });
    await viewed(c, { limits: slow });
    await sleep(60);
    for (const k of [a, b, c]) {
      const later = await decide(k, 1);
      expect(later.r.limits).toEqual(slow);
      expect(later.d).toMatchObject({ allowed: false, limit: 10, remaining: 0 });
    }
  });

  it('overrides: a blocked key is refused whatever its bucket holds, nothing taken; unblocked, it takes again; a block ends by itself', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    await take(store, 'ten', k, 3);
    const t0 = performance.now();
    const set = await block(store, 'ten', k, 60_000);
    expect(set.after?.blockedUntilUs).toBe(set.atUs + 60_000_000);
    for (const cost of [1, 0]) {
      const { r, d } = await take(store, 'ten', k, cost);
      expect(d.allowed).toBe(false);
      expect(r.blockedUntilUs).toBe(set.after!.blockedUntilUs);
      // The refusal lasts until the block ends: less the store time since it was set.
      expect(r.blockedUntilUs! - r.atUs!).toBeLessThanOrEqual(60_000_000);
      expect(r.blockedUntilUs! - r.atUs!).toBeGreaterThanOrEqual(60_000_000 - Math.ceil(performance.now() - t0 + res) * 1000);
    }
    // The bucket is as it was: 7 left.
    await block(store, 'ten', k, null);
    expect((await take(store, 'ten', k, 0)).d).toMatchObject({ allowed: true, remaining: 7 });
    await block(store, 'ten', k, 60_000);
    expect((await block(store, 'ten', k, null)).after).toBeUndefined();
    expect((await take(store, 'ten', k, 1)).d).toMatchObject({ allowed: true, remaining: 6 });
    const short = await block(store, 'ten', k, 1000);
    expect((await take(store, 'ten', k, 1)).r.blockedUntilUs).toBe(short.after!.blockedUntilUs);
    await sleep(1050 + res);
    expect((await take(store, 'ten', k, 1)).d).toMatchObject({ allowed: true, remaining: 5 });
  });

  it('overrides: a charge and a refund during a block are applied; a take is refused', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    const p = policies.ten;
    const sk = storageKey('ten', k);
    /** An adjustment (a charge, a refund, a settlement) and the bucket it leaves, as a peek reads it. */
    const adjusted = async (args: StepArgs) => {
      const r = await store.step(sk, args);
      return { r, d: toPeekDecision(r.limits ? policyUnder(p, r.limits) : p, r) };
    };
    // A charge of 2 (an id names it), then the block.
    const ttlMs = 60_000;
    expect((await store.step(sk, { ...stepArgs(p, 2, 0), op: { id: 'charge', ttlMs, fingerprint: 'take|2' } })).allowed).toBe(true);
    const { after } = await block(store, 'ten', k, 60_000);
    const until = after!.blockedUntilUs!;
    // Every take is refused and takes nothing: a take, a reservation, a lease grant.
    for (const args of [stepArgs(p, 1, 0), stepArgs(p, 1, 60_000), grantArgs(p, 3)]) {
      const r = await store.step(sk, args);
      expect(r.allowed).toBe(false);
      expect(r.tokens ?? 0).toBe(0);
      expect(r.blockedUntilUs).toBe(until);
    }
    // A charge beyond the estimate (work done while blocked) is paid: 8 left, 4 more charged, 4 left.
    const charged = await adjusted(adjustArgs(p, 4));
    expect(charged.r.blockedUntilUs).toBe(until);
    expect(charged.d.remaining).toBe(4);
    // A refund, and a lease's refund, give back.
    expect((await adjusted(adjustArgs(p, -1))).d.remaining).toBe(5);
    const refunded = await adjusted(refundArgs(p, p.tokenUnits));
    expect(refunded.r.blockedUntilUs).toBe(until);
    expect(refunded.d.remaining).toBe(6);
    // A settlement of the charge of 2 at an actual 5: 3 more.
    const settled = await adjusted({ ...settleArgs(p, 5, 'charge'), op: { id: SETTLE_OP + 'charge', ttlMs, fingerprint: 'settle|5' } });
    expect(settled.r.unknownCharge).toBeUndefined();
    expect(settled.r.blockedUntilUs).toBe(until);
    expect(settled.d.remaining).toBe(3);
    expect((await take(store, 'ten', k, 1)).r).toMatchObject({ allowed: false, blockedUntilUs: until });
    // Unblocked, the bucket holds what the adjustments left.
    await block(store, 'ten', k, null);
    expect((await take(store, 'ten', k, 0)).d).toMatchObject({ allowed: true, remaining: 3 });
    // Under a key's own numbers and a block: the charge runs under them (converted), the block kept.
    const k2 = suite.key();
    const five = numbers({ capacity: 5, refillPerSecond: SLOW });
    await set(store, 'ten', k2, five);
    const own = await block(store, 'ten', k2, 60_000);
    expect(own.after).toEqual({ limits: five, blockedUntilUs: own.atUs + 60_000_000 });
    const r = await store.step(storageKey('ten', k2), adjustArgs(p, 2));
    expect(r).toMatchObject({ limits: five, blockedUntilUs: own.after!.blockedUntilUs });
    expect(toPeekDecision(policyUnder(p, five), r)).toMatchObject({ limit: 5, remaining: 3 });
    expect((await take(store, 'ten', k2, 1)).r).toMatchObject({ allowed: false, blockedUntilUs: own.after!.blockedUntilUs });
    await block(store, 'ten', k2, null);
    expect((await take(store, 'ten', k2, 0)).d).toMatchObject({ limit: 5, remaining: 3 });
  });

  it('overrides: a record outlives the bucket key’s expiry, and reset keeps it', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    const three = numbers({ capacity: 3, refillPerSecond: 1000 });
    await set(store, 'tenFast', k, three);
    // The bucket refills in 1 ms; its key would expire then.
    expect((await take(store, 'tenFast', k, 1)).d).toMatchObject({ allowed: true, limit: 3, remaining: 2 });
    if (suite.expiryMs) expect(await suite.expiryMs(storageKey('tenFast', k))).toBeNull();
    await sleep(30 + res);
    expect((await store.override(storageKey('tenFast', k), { base: baseNumbers(policies.tenFast) })).after).toEqual({ limits: three });
    expect((await take(store, 'tenFast', k, 3)).d).toMatchObject({ allowed: true, limit: 3, remaining: 0 });
    // Reset empties the bucket and keeps the record (numbers that refill slowly, so that it shows).
    const slow = numbers({ capacity: 3, refillPerSecond: SLOW });
    const k3 = suite.key();
    await set(store, 'tenFast', k3, slow);
    expect((await take(store, 'tenFast', k3, 3)).d).toMatchObject({ allowed: true, remaining: 0 });
    expect((await take(store, 'tenFast', k3, 1)).d.allowed).toBe(false);
    await store.reset(storageKey('tenFast', k3));
    const reset = await take(store, 'tenFast', k3, 0);
    expect(reset.r.limits).toEqual(slow);
    expect(reset.d).toMatchObject({ limit: 3, remaining: 3 });
    // With an end, the key is kept until then (and no longer than the bucket needs after it).
    const k2 = suite.key();
    await set(store, 'tenFast', k2, three, 5000);
    await take(store, 'tenFast', k2, 1);
    if (suite.expiryMs) {
      const ttl = await suite.expiryMs(storageKey('tenFast', k2));
      expect(ttl).not.toBeNull();
      expect(ttl!).toBeGreaterThan(5000 - 1000);
      expect(ttl!).toBeLessThanOrEqual(5000 + 2 + res);
    }
    expect((await take(store, 'tenFast', k2, 0)).r.limits).toEqual(three);
  });

  it('overrides: a take retried with its operation id after a policy-wide change lowered the capacity below its cost answers its recorded decision (review 7, F6)', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    const p = policies.ten;
    const op = { id: 'retried-take', ttlMs: 60_000, fingerprint: 'take 6' };
    const first = await store.step(storageKey('ten', k), { ...stepArgs(p, 6, 0), op });
    expect(first).toMatchObject({ allowed: true });
    // The incident: 2 for every key. The client retries its request (a lost answer), its node now with the change's view.
    const change = { id: `${first.atUs!}.incident#ten`, limits: numbers({ capacity: 2, refillPerSecond: SLOW }) };
    const again = await store.step(storageKey('ten', k), { ...stepArgs(p, 6, 0, change), op });
    expect(again).toMatchObject({ allowed: true, repeated: true });
    expect(again.debtUnits).toEqual(first.debtUnits);
    // Nothing was charged twice: the key has the 4 left the first take left it, under the change's 2.
    expect((await take(store, 'ten', k, 0)).r.limits).toBeUndefined();
  });

  it('overrides: setters and takers at once; every take is decided by one set of numbers, and the tokens add up', async (ctx) => {
    const store = await storeFor(ctx);
    const k = suite.key();
    const twenty = numbers({ capacity: 20, refillPerSecond: SLOW });
    const calls: Promise<{ allowed: boolean; under: 'base' | 'twenty' } | 'set'>[] = [];
    for (let i = 0; i < 30; i++) {
      if (i === 10) calls.push(set(store, 'ten', k, twenty).then(() => 'set' as const));
      calls.push(take(store, 'ten', k).then(({ r }) => ({ allowed: r.allowed, under: r.limits === undefined ? ('base' as const) : (expect(r.limits).toEqual(twenty), 'twenty' as const) })));
    }
    const results = (await Promise.all(calls)).filter((x) => x !== 'set');
    const allowedUnder = (n: 'base' | 'twenty') => results.filter((x) => x.allowed && x.under === n).length;
    // Before the change at most the policy's 10; after it the 20 less what was spent before (carried).
    expect(allowedUnder('base')).toBeLessThanOrEqual(10);
    expect(allowedUnder('base') + allowedUnder('twenty')).toBeLessThanOrEqual(20);
    const final = await take(store, 'ten', k, 0);
    expect(final.r.limits).toEqual(twenty);
    expect(final.d.remaining).toBe(20 - allowedUnder('base') - allowedUnder('twenty'));
    // Two setters at once: the key ends with one of the two, whole.
    const k2 = suite.key();
    const five = numbers({ capacity: 5, refillPerSecond: SLOW });
    const [, a, , b] = await Promise.all([set(store, 'ten', k2, twenty), take(store, 'ten', k2, 4), set(store, 'ten', k2, five), take(store, 'ten', k2, 4)]);
    for (const t of [a, b]) expect([undefined, twenty, five]).toContainEqual(t.r.limits);
    const after = (await store.override(storageKey('ten', k2), { base: baseNumbers(policies.ten) })).after;
    expect([twenty, five]).toContainEqual(after?.limits);
  });
}
