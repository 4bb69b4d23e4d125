// The memory store's own bookkeeping: buckets in slots of one Float64Array (a slot per key, reused once
// its bucket is dropped), buckets of several limits beside them, keys flattened before the lookup,
// takeOneSync's index by prefix and key, and the maxKeys bound over all of it. The conformance suite
// (stores.test.ts) covers the step itself.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createLimiter, memoryStore, StoreError, type PolicyConfig } from '../src/index.js';
import { stepArgs } from '../src/core/gcra.js';
import { baseNumbers } from '../src/core/override.js';
import { resolvePolicy } from '../src/core/policy.js';

const ONE = { capacity: 10, refillPerSecond: 1 };
const TWO = { limits: { fast: { capacity: 10, refillPerSecond: 1 }, slow: { capacity: 100, refillPerSecond: 0.01 } } };

describe('memory store: keys', () => {
  it('keys that differ only by whitespace at either end are different buckets', async () => {
    const store = memoryStore({ nowMs: () => 0 });
    const limiter = createLimiter({ store, policies: { p: ONE } });
    const base = 'a-key-long-enough-to-be-a-rope';
    const keys = [base, ` ${base}`, `${base} `, `\u00a0${base}`, `${base}\n`, `\ufeff${base}`, `${base}\u2028`, 'x', ' x', 'x '];
    for (const [i, key] of keys.entries()) {
      for (let j = 0; j <= i; j++) await limiter.take('p', key);
    }
    expect(store.size).toBe(keys.length);
    for (const [i, key] of keys.entries()) expect((await limiter.peek('p', key)).remaining).toBe(10 - (i + 1));
    await limiter.reset('p', ` ${base}`);
    expect((await limiter.peek('p', ` ${base}`)).remaining).toBe(10);
    expect((await limiter.peek('p', base)).remaining).toBe(9);
  });

  it('a step result is the caller’s: later steps on the same bucket do not change it', async () => {
    const store = memoryStore({ nowMs: () => 0 });
    const args = { limits: [{ costUnits: 1, limitUnits: 10, refillUnitsPerUs: 1 }] };
    const first = store.stepSync('k', args);
    const second = store.stepSync('k', args);
    store.stepSync('k', { limits: [{ costUnits: 1, limitUnits: 10, refillUnitsPerUs: 1 }, { costUnits: 1, limitUnits: 10, refillUnitsPerUs: 1 }] });
    expect(first.debtUnits).toEqual([1]);
    expect(second.debtUnits).toEqual([2]);
  });
});

describe('memory store: slots', () => {
  it('a dropped bucket’s slot goes to the next new key, which starts full', async () => {
    let now = 0;
    const store = memoryStore({ nowMs: () => now });
    const limiter = createLimiter({ store, policies: { p: ONE } });
    for (let i = 0; i < 5; i++) await limiter.take('p', 'a', { cost: 2 });
    await limiter.reset('p', 'a');
    await limiter.take('p', 'b');
    expect((await limiter.peek('p', 'b')).remaining).toBe(9);
    expect((await limiter.peek('p', 'a')).remaining).toBe(10);
    // Refunded to full: the bucket is dropped, and its slot reused.
    await limiter.take('p', 'c', { cost: 3 });
    await limiter.adjust('p', 'c', -3);
    expect(store.size).toBe(1);
    await limiter.take('p', 'd', { cost: 4 });
    expect((await limiter.peek('p', 'd')).remaining).toBe(6);
    expect((await limiter.peek('p', 'b')).remaining).toBe(9);
    now += 1000;
    expect((await limiter.peek('p', 'd')).remaining).toBe(7);
  });

  it('keeps every bucket exact while its storage grows', async () => {
    let now = 0;
    const store = memoryStore({ maxKeys: 10_000, nowMs: () => now });
    const limiter = createLimiter({ store, policies: { p: { capacity: 1000, refillPerSecond: 1 } } });
    for (let i = 0; i < 3000; i++) await limiter.take('p', `user-${i}`, { cost: 1 + (i % 7) });
    expect(store.size).toBe(3000);
    now += 2000;
    for (let i = 0; i < 3000; i += 97) {
      expect((await limiter.peek('p', `user-${i}`)).remaining).toBe(Math.min(1000, 1000 - (1 + (i % 7)) + 2));
    }
  });

  it('a key moves between one limit and several (two policies sharing a name and a store)', async () => {
    let now = 0;
    const store = memoryStore({ nowMs: () => now });
    const one = createLimiter({ store, policies: { p: ONE } });
    const two = createLimiter({ store, policies: { p: TWO } });
    await one.take('p', 'k', { cost: 4 });
    // The policy gained a limit: the stored debt is the first limit's, the new one starts full.
    const d = await two.take('p', 'k');
    expect(d.limits!.map((l) => l.remaining)).toEqual([5, 99]);
    // And lost it again: one limit, whose debt carried over.
    expect((await one.take('p', 'k')).remaining).toBe(4);
    expect((await two.peek('p', 'k')).limits!.map((l) => l.remaining)).toEqual([4, 100]);
    await two.take('p', 'k', { cost: 2 });
    await one.reset('p', 'k');
    expect(store.size).toBe(0);
    await one.take('p', 'other');
    expect((await two.peek('p', 'other')).limits!.map((l) => l.remaining)).toEqual([9, 100]);
    now += 1000;
    expect((await one.peek('p', 'other')).remaining).toBe(10);
  });
});

describe('memory store: maxKeys', () => {
  it('bounds buckets of one limit and of several together, dropping full ones first', async () => {
    let now = 0;
    const store = memoryStore({ maxKeys: 20, nowMs: () => now });
    const limiter = createLimiter({ store, policies: { one: ONE, two: TWO } });
    for (let i = 0; i < 10; i++) {
      await limiter.take('one', `a${i}`);
      await limiter.take('two', `b${i}`);
    }
    expect(store.size).toBe(20);
    // 1 s later the buckets of one limit are full; those of two limits are not (the slow one needs 100 s).
    now += 1000;
    for (let i = 0; i < 10; i++) await limiter.take('two', `c${i}`);
    expect(store.size).toBeLessThanOrEqual(20);
    expect(store.evictedActive).toBe(0);
    for (let i = 0; i < 10; i++) expect((await limiter.peek('two', `b${i}`)).limits![1]!.remaining).toBe(99);
    // Now nothing is full: new keys evict buckets that are not full.
    for (let i = 0; i < 50; i++) await limiter.take('one', `d${i}`);
    expect(store.size).toBeLessThanOrEqual(20);
    expect(store.evictedActive).toBeGreaterThan(0);
  });

  it('a bucket of several limits is full only when every limit is', async () => {
    let now = 0;
    const store = memoryStore({ maxKeys: 2, nowMs: () => now });
    const limiter = createLimiter({ store, policies: { two: TWO } });
    await limiter.take('two', 'x', { cost: 1 });
    await limiter.take('two', 'y', { cost: 1 });
    // The fast limit is full again after 1 s, the slow one after 100 s: neither bucket is full, so a
    // third key must evict one that is not (counted), the oldest unused: x.
    now += 1000;
    await limiter.take('two', 'z');
    expect(store.size).toBe(2);
    expect(store.evictedActive).toBe(1);
    expect((await limiter.peek('two', 'x')).limits![1]!.remaining).toBe(100);
    expect((await limiter.peek('two', 'y')).limits![1]!.remaining).toBe(99);
    // After 100 s every limit of y and z is full: the next new key drops the full buckets it finds (both),
    // and none of them counts as evicted.
    now += 100_000;
    await limiter.take('two', 'w');
    expect(store.size).toBe(1);
    expect(store.evictedActive).toBe(1);
  });

  it("a bucket full again is not taken for full while its reservation's caller may still come (1 ms after its slot)", async () => {
    let nowUs = 1_790_000_000_000_000;
    const store = memoryStore({ maxKeys: 1, nowMs: () => nowUs / 1000 });
    const fast = resolvePolicy('f', { capacity: 10, refillPerSecond: 1_000_000 }, { onStoreError: 'deny', timeoutMs: 1000 });
    await store.step('a', stepArgs(fast, 10, 0));
    expect((await store.step('a', stepArgs(fast, 1, 5))).allowed).toBe(true);
    // Full 11 µs on, its caller at the next ms: a new key before then evicts it as a bucket that was not full.
    nowUs += 500;
    await store.step('b', stepArgs(fast, 1, 0));
    expect(store.evictedActive).toBe(1);
    // Past that ms a full bucket is dropped as full.
    nowUs += 1000;
    await store.step('c', stepArgs(fast, 1, 0));
    expect(store.evictedActive).toBe(1);
  });
});

describe('memory store: takeOneSync, the limiter’s hot path', () => {
  // Two stores on one fake clock get the same operations, except that one takes through takeOneSync and
  // the other through stepSync with the same limit: every answer, and every bucket afterwards (read by a
  // peek of every limit), must be the same, with eviction (a small maxKeys), buckets stored with several
  // limits under the same key, refunds, resets, and costs of 0 and below among the operations. takeOneSync
  // gets each storage key split into prefix and key at any point, so one bucket is reached by several
  // splits (its index holds one of them).
  it('answers and stores what stepSync does, for any sequence of operations', () => {
    const limit = fc.record({ costUnits: fc.integer({ min: -30, max: 40 }), limitUnits: fc.integer({ min: 1, max: 60 }), refillUnitsPerUs: fc.constantFrom(1, 0.5, 1e-3, 1e-6, 1e-6, 1e-6, 3) });
    const op = fc.oneof(
      fc.record({ kind: fc.constant('takeOne' as const), key: fc.integer({ min: 0, max: 5 }), split: fc.oneof({ arbitrary: fc.constant(-1), weight: 3 }, { arbitrary: fc.integer({ min: 0, max: 20 }), weight: 1 }), limit }),
      fc.record({ kind: fc.constant('reset' as const), key: fc.integer({ min: 0, max: 5 }) }),
      fc.record({ kind: fc.constant('several' as const), key: fc.integer({ min: 0, max: 5 }), limits: fc.array(limit, { minLength: 2, maxLength: 3 }) }),
      fc.record({ kind: fc.constant('adjust' as const), key: fc.integer({ min: 0, max: 5 }), limit }),
      fc.record({ kind: fc.constant('wait' as const), us: fc.integer({ min: 0, max: 50_000 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), fc.integer({ min: 1, max: 4 }), (ops, maxKeys) => {
        let nowUs = 1_000_000;
        const nowMs = () => nowUs / 1000;
        const hot = memoryStore({ maxKeys, nowMs });
        const general = memoryStore({ maxKeys, nowMs });
        // Keys of two policies, one of 13 characters or more after any prefix of up to 2.
        const key = (k: number) => (k < 3 ? `el:policy:key-${k}` : `el:p:k${k}`);
        const answer = (r: { allowed: boolean; debtUnits: number[] }) => (r.allowed ? r.debtUnits[0]! : -1 - r.debtUnits[0]!);
        for (const o of ops) {
          if (o.kind === 'wait') nowUs += o.us;
          else if (o.kind === 'takeOne') {
            const k = key(o.key);
            // Mostly the limiter's split (after the policy's name, split -1), so that the index answers.
            const split = o.split >= 0 ? o.split : k.indexOf(':', 3) + 1;
            // The key part as a rope (a concatenation), as a caller's key often is.
            const rest = k.slice(split, split + 2) + k.slice(split + 2);
            expect(hot.takeOneSync(k.slice(0, split), rest, o.limit)).toBe(answer(general.stepSync(k, { limits: [o.limit] })));
          } else if (o.kind === 'reset') {
            void hot.reset(key(o.key));
            void general.reset(key(o.key));
          } else {
            const args = o.kind === 'several' ? { limits: o.limits } : { limits: [o.limit], adjust: true };
            expect(hot.stepSync(key(o.key), args)).toEqual(general.stepSync(key(o.key), args));
          }
          expect(hot.size).toBe(general.size);
          expect(hot.evictedActive).toBe(general.evictedActive);
        }
        const peek = { limits: [0, 1, 2].map(() => ({ costUnits: 0, limitUnits: 60, refillUnitsPerUs: 1 })) };
        for (let k = 0; k <= 5; k++) expect(hot.stepSync(key(k), peek)).toEqual(general.stepSync(key(k), peek));
      }),
      { numRuns: 400 },
    );
  });

  // One bucket reached by two splits of its storage key: the first take makes it, the next (by the other
  // split) finds it by its storage key and indexes it, and the next by the first split finds it by its
  // storage key too and must not index it again (the slot's one index entry is the one that dropping
  // the slot removes). Then the bucket is evicted and its slot reused by another key: neither split may
  // reach that key's bucket.
  it('drops a bucket from the index when it is evicted, whichever split reached it', () => {
    let nowUs = 1_000_000;
    const store = memoryStore({ maxKeys: 1, nowMs: () => nowUs / 1000 });
    const slow = { costUnits: 5, limitUnits: 50, refillUnitsPerUs: 1e-6 };
    expect(store.takeOneSync('el:p:', 'ab', slow)).toBe(5);
    expect(store.takeOneSync('el:', 'p:ab', slow)).toBe(10);
    expect(store.takeOneSync('el:p:', 'ab', slow)).toBe(15);
    nowUs += 1;
    expect(store.takeOneSync('el:p:', 'cd', slow)).toBe(5); // evicts el:p:ab (maxKeys 1)
    expect(store.evictedActive).toBe(1);
    expect(store.takeOneSync('el:p:', 'cd', slow)).toBe(10);
    expect(store.takeOneSync('el:', 'p:ab', slow)).toBe(5); // a new bucket, which evicts el:p:cd
    expect(store.takeOneSync('el:p:', 'ab', slow)).toBe(10);
    expect(store.takeOneSync('el:p:', 'cd', slow)).toBe(5);
    void store.reset('el:p:cd');
    expect(store.size).toBe(0);
    expect(store.takeOneSync('el:p:', 'cd', slow)).toBe(5);
  });

  it('keeps keys as they are, whitespace, ropes and slices included', () => {
    const store = memoryStore({ nowMs: () => 0 });
    const slow = { costUnits: 1, limitUnits: 50, refillUnitsPerUs: 1e-6 };
    const body = `{"user":"  a-user-with-spaces  ","pad":"${'x'.repeat(10_000)}"}`;
    const sliced = body.slice(9, 32); // '  a-user-with-spaces  ', a slice of the body
    const keys = [sliced, sliced.trim(), `${sliced.trim()} `, ' a', 'é'.repeat(20), `${'k'.repeat(12)}\u2028`];
    for (const [i, key] of keys.entries()) {
      for (let j = 0; j <= i; j++) store.takeOneSync('el:p:', key, slow);
    }
    expect(store.size).toBe(keys.length);
    // Each bucket is its own key's, by any split of the storage key.
    for (const [i, key] of keys.entries()) expect(store.takeOneSync('el:', `p:${key}`, slow)).toBe(i + 2);
  });
});

describe('memory store: override records', () => {
  const policyOf = (config: PolicyConfig) => resolvePolicy('p', config, { onStoreError: 'deny', timeoutMs: 1000 });
  const p = policyOf(ONE);
  const base = baseNumbers(p);
  const five = baseNumbers(policyOf({ capacity: 5, refillPerSecond: 1 }));

  it('sets at most maxOverrides records: one more is a StoreError naming the option, and no record is dropped for it', async () => {
    const store = memoryStore({ maxOverrides: 3, nowMs: () => 0 });
    for (const k of ['a', 'b', 'c']) await store.override(k, { base, limits: five });
    const refused = store.override('d', { base, blockForMs: 1000 });
    await expect(refused).rejects.toBeInstanceOf(StoreError);
    await expect(store.override('d', { base, blockForMs: 1000 })).rejects.toThrow(/maxOverrides \(3\)/);
    // Changing a key that has one, and clearing one, need no room.
    await store.override('a', { base, blockForMs: 1000 });
    await store.override('b', { base, limits: null });
    await store.override('d', { base, limits: five });
    for (const k of ['a', 'c', 'd']) expect((await store.override(k, { base })).after?.limits).toEqual(five);
    expect(() => memoryStore({ maxOverrides: 0 })).toThrow(/maxOverrides/);
  });

  it('records that have ended give their room back when it is needed: a block past its end, numbers past theirs on a bucket full by then (review 5, L2)', async () => {
    let ms = 0;
    const limiter = createLimiter({ store: memoryStore({ maxOverrides: 3, nowMs: () => ms }), policies: { p: { capacity: 5, refillPerSecond: 1 } } });
    await limiter.block('p', 'a', { forMs: 1 });
    await limiter.block('p', 'b', { forMs: 1 });
    await limiter.setLimits('p', 'c', { capacity: 9, refillPerSecond: 1 }, { expiresInMs: 1 });
    ms += 3_600_000;
    for (let i = 0; i < 100; i++) await limiter.take('p', `other-${i}`);
    await limiter.block('p', 'abuser', { forMs: 60_000 });
    expect(await limiter.take('p', 'abuser')).toMatchObject({ allowed: false, reason: 'blocked' });
    // Numbers that ended on a bucket not full at their end stay until the key's next step carries it
    // (counted), while live records are never dropped: the room is full again.
    await limiter.setLimits('p', 'd', { capacity: 5, refillPerSecond: 0.01 }, { expiresInMs: 1000 });
    expect(await limiter.take('p', 'd', { cost: 5 })).toMatchObject({ allowed: true, remaining: 0 });
    await limiter.block('p', 'e', { forMs: 60_000 });
    ms += 2000;
    await expect(limiter.block('p', 'f', { forMs: 60_000 })).rejects.toThrow(/maxOverrides \(3\)/);
    // d's debt is carried at the end of its numbers (4.99 still spent at 1 s, at 0.01/s) to the policy's
    // 5 at 1/s: 3.99 left 1 s later, so one token and no more (a bucket let go would hold 5).
    expect(await limiter.take('p', 'd')).toMatchObject({ allowed: true, remaining: 0 });
    await limiter.block('p', 'f', { forMs: 60_000 });
  });

  it('during a policy-wide change, a block that ended gives its room back too; the key keeps the change (review 7, F1)', async () => {
    let ms = 0;
    const limiter = createLimiter({ store: memoryStore({ maxOverrides: 2, nowMs: () => ms }), policies: { p: { capacity: 5, refillPerSecond: 1 } } });
    await limiter.setPolicyLimits('p', { capacity: 2, refillPerSecond: 1 });
    for (const k of ['a', 'b']) {
      expect((await limiter.take('p', k)).limit).toBe(2);
      await limiter.block('p', k, { forMs: 1000 });
    }
    await expect(limiter.block('p', 'c', { forMs: 60_000 })).rejects.toThrow(/maxOverrides \(2\)/);
    ms += 2000;
    await limiter.block('p', 'abuser', { forMs: 60_000 });
    expect(await limiter.take('p', 'abuser')).toMatchObject({ allowed: false, reason: 'blocked' });
    // a is still decided under the change (2 at 1/s; its token of 2 s ago refilled).
    expect(await limiter.take('p', 'a')).toMatchObject({ allowed: true, limit: 2, remaining: 1 });
  });

  it('a block on a key holding a copy of the policy-wide change counts against maxOverrides (only the change itself is free)', async () => {
    const limiter = createLimiter({ store: memoryStore({ maxOverrides: 1 }), policies: { p: { capacity: 5, refillPerSecond: 1 } } });
    await limiter.setPolicyLimits('p', { capacity: 2, refillPerSecond: 1 });
    // Each take installs the change's copy beside the key's bucket (not counted: it goes with the bucket).
    for (const k of ['a', 'b', 'c']) expect((await limiter.take('p', k)).limit).toBe(2);
    await limiter.block('p', 'a', { forMs: 60_000 });
    await expect(limiter.block('p', 'b', { forMs: 60_000 })).rejects.toThrow(/maxOverrides \(1\)/);
    await expect(limiter.setLimits('p', 'c', { capacity: 9, refillPerSecond: 1 })).rejects.toThrow(/maxOverrides \(1\)/);
    expect((await limiter.take('p', 'b')).allowed).toBe(true);
    // Unblocking frees the room; the change is still in force.
    await limiter.unblock('p', 'a');
    await limiter.block('p', 'b', { forMs: 60_000 });
    expect((await limiter.take('p', 'b')).reason).toBe('blocked');
    expect(await limiter.getPolicyLimits('p')).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 2 }] });
  });

  it('at maxOverrides a policy-wide change still goes in (one record per policy, not counted), and takes no key\'s room', async () => {
    const store = memoryStore({ maxOverrides: 2, nowMs: () => 0 });
    for (const k of ['p:a', 'p:b']) await store.override(k, { base, limits: five });
    await expect(store.override('p:c', { base, limits: five })).rejects.toThrow(/maxOverrides \(2\)/);
    // The policy's own change (Limiter.setPolicyLimits writes it with its id), set, replaced and cleared.
    expect((await store.override('p*', { base, limits: five, policyId: 'w1' })).after).toEqual({ limits: five, policyId: '1.0.0.w1' });
    await store.override('p*', { base, limits: base, policyId: 'w2' });
    // Still no room for a third key, and room again once one is cleared.
    await expect(store.override('p:c', { base, blockForMs: 1000 })).rejects.toThrow(/maxOverrides \(2\)/);
    await store.override('p*', { base, limits: null });
    await store.override('p:a', { base, limits: null });
    await store.override('p:c', { base, blockForMs: 1000 });
    await expect(store.override('p:d', { base, blockForMs: 1000 })).rejects.toThrow(/maxOverrides \(2\)/);
  });

  it('a record outlives its bucket: eviction and reset drop the bucket and keep the record', async () => {
    let now = 0;
    const store = memoryStore({ maxKeys: 2, nowMs: () => now });
    const limiter = createLimiter({ store, policies: { p: ONE } });
    await store.override('el:p:x', { base, limits: five });
    await limiter.take('p', 'x', { cost: 3 });
    // Two more keys push x's bucket out (neither is full); x's record stays.
    await limiter.take('p', 'y');
    await limiter.take('p', 'z');
    expect(store.evictedActive).toBeGreaterThan(0);
    expect(store.stepSync('el:p:x', stepArgs(p, 0, 0))).toMatchObject({ debtUnits: [0], limits: five });
    await store.stepSync('el:p:x', stepArgs(p, 2, 0));
    await limiter.reset('p', 'x');
    expect(store.stepSync('el:p:x', stepArgs(p, 5, 0))).toMatchObject({ allowed: true, limits: five });
    expect(store.stepSync('el:p:x', stepArgs(p, 1, 0))).toMatchObject({ allowed: false, limits: five });
    now += 1e9;
    await limiter.take('p', 'w');
    expect((await store.override('el:p:x', { base })).after).toEqual({ limits: five });
  });

  it('the hot path (takeOneSync) leaves a key with a record to stepSync: a blocked key is refused, others are not slowed', async () => {
    const store = memoryStore({ nowMs: () => 0 });
    const limiter = createLimiter({ store, policies: { p: ONE } });
    await store.override('el:p:blocked', { base, blockForMs: 60_000 });
    expect(store.takeOneSync('el:p:', 'blocked', stepArgs(p, 1, 0).limits[0]!)).toBeNaN();
    expect(await limiter.take('p', 'blocked')).toMatchObject({ allowed: false });
    expect(store.stepSync('el:p:blocked', stepArgs(p, 1, 0))).toEqual({ allowed: false, debtUnits: [0], atUs: 0, blockedUntilUs: 60_000_000 });
    expect(await limiter.take('p', 'free')).toMatchObject({ allowed: true, remaining: 9 });
    expect(store.takeOneSync('el:p:', 'free', stepArgs(p, 1, 0).limits[0]!)).toBe(2 * p.tokenUnits);
  });

  it('a repeated operation id answers in the numbers its step ran under', async () => {
    const store = memoryStore({ nowMs: () => 0 });
    await store.override('k', { base, limits: five });
    const args = { ...stepArgs(p, 2, 0), op: { id: 'op-1', ttlMs: 60_000, fingerprint: 'take|2' } };
    const first = store.stepSync('k', args);
    expect(first).toMatchObject({ allowed: true, debtUnits: [2 * five[0]!.tokenUnits], limits: five });
    expect(store.stepSync('k', args)).toEqual({ allowed: true, debtUnits: first.debtUnits, atUs: 0, repeated: true, limits: five });
    await store.override('k', { base, blockForMs: 1000 });
    const blocked = { ...args, op: { ...args.op, id: 'op-2' } };
    store.stepSync('k', blocked);
    expect(store.stepSync('k', blocked)).toMatchObject({ allowed: false, repeated: true, limits: five, blockedUntilUs: 1_000_000 });
  });

  it('a record a step installs for a policy-wide change goes with its bucket and is not counted', async () => {
    const store = memoryStore({ maxOverrides: 1, nowMs: () => 0 });
    const change = { id: 'c1', limits: five };
    for (const k of ['a', 'b', 'c']) expect(store.stepSync(k, stepArgs(p, 1, 0, change))).toMatchObject({ allowed: true, limits: five });
    expect((await store.override('a', { base })).after).toEqual({ limits: five, policyId: 'c1' });
    await store.override('z', { base, blockForMs: 10 });
    await store.reset('a');
    expect((await store.override('a', { base })).after).toBeUndefined();
    // At maxOverrides 1, with 'z' blocked the bound is reached: b's installed record cannot become its own.
    await expect(store.override('b', { base, limits: base })).rejects.toThrow(/maxOverrides \(1\)/);
    await store.override('z', { base, blockForMs: null });
    expect((await store.override('b', { base, limits: five })).after).toEqual({ limits: five });
    // A peek of a full bucket under the change stores nothing.
    expect(store.stepSync('n', stepArgs(p, 0, 0, change))).toMatchObject({ limits: five });
    expect((await store.override('n', { base })).after).toBeUndefined();
  });
});
