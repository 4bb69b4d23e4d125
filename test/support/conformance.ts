// The one conformance suite. It runs unchanged against every store (memory, Redis over TCP with two
// clients, Redis through the Upstash REST protocol, MongoDB through mingo, and a real MongoDB when
// MONGODB_URI is set); its cases for override records are in ./conformance-overrides.ts. Time is real here, since Redis and MongoDB clocks cannot be faked: each timing
// assertion brackets the store's elapsed time between client-side timestamps taken around the calls.
import { describe, expect, it, afterAll } from 'vitest';
import { settleConformance } from './settle-conformance.js';
import { createLimiter, InvalidInputError, UnknownPolicyError, type Limiter, type PolicyConfig, type Store } from '../../src/index.js';
import { overrideConformance } from './conformance-overrides.js';

export interface StoreHarness {
  /** Creates a store; called once per suite. */
  create(): Promise<Store>;
  /** Ms until the storage key expires in the store, or null when it has no expiry. Stores without expiry omit this. */
  expiryMs?(storageKey: string): Promise<number | null>;
  /** The store clock's resolution in ms (Redis TIME: 0.001; $$NOW: 1). */
  clockResolutionMs: number;
  close?(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Node timers may fire up to 1 ms early against performance.now(); this never returns early. */
async function sleepUntil(t: number): Promise<void> {
  while (performance.now() < t) await sleep(Math.max(1, Math.ceil(t - performance.now())));
}

/**
 * A store wrapper that counts calls, to prove that rejected input never reaches the store. It also
 * freezes the step arguments, which the limiter shares between decisions: a store that wrote to them
 * would throw here (modules are strict) and fail the suite.
 */
function counting(store: Store): Store & { calls: number } {
  const c = {
    name: store.name,
    calls: 0,
    step: (k: string, a: Parameters<Store['step']>[1], o?: Parameters<Store['step']>[2]) => (c.calls++, store.step(k, Object.freeze(a), o)),
    reset: (k: string) => (c.calls++, store.reset(k)),
    ping: () => store.ping(),
    // A reading of a policy-wide record (its key ends in '*') is the limiter's own, in the background
    // once the last is half policyRefreshMs old: not input reaching the store, so not counted.
    ...(store.override ? { override: (k: string, a: Parameters<NonNullable<Store['override']>>[1]) => (k.endsWith('*') || c.calls++, store.override!(k, Object.freeze(a))) } : {}),
  };
  return c;
}

const POLICIES = {
  five: { capacity: 5, refillPerSecond: 1 },
  slow: { capacity: 2, refillPerSecond: 1 / 30 },
  fast: { capacity: 10, refillPerSecond: 1000 },
  ten: { capacity: 10, refillPerSecond: 1 },
  half: { capacity: 1, refillPerSecond: 2 },
  fifo: { capacity: 1, refillPerSecond: 20 },
  // The largest bucket at the slowest refill it allows (2e15 units of 1 µs, under 2^51): 2e12 ms to refill.
  huge: { capacity: 1e9, refillPerSecond: 0.5 },
  // Two limits, neither refilling within a test: a burst of 3 and a sustained 5.
  two: { limits: { burst: { capacity: 3, refillPerSecond: 1 / 30 }, sustained: { capacity: 5, refillPerSecond: 1 / 60 } } },
  // Requests and tokens per minute, as an LLM API limits (tokens refill 1 per ms: a debt is measured in ms).
  llm: { limits: { requests: { capacity: 10, refillPerSecond: 1 / 60 }, tokens: { capacity: 1000, refillPerSecond: 1000 } } },
} satisfies Record<string, PolicyConfig>;

export function storeConformance(name: string, harness: StoreHarness): void {
  describe(`store conformance: ${name}`, () => {
    let store: Store & { calls: number };
    let limiter: Limiter<keyof typeof POLICIES>;
    const prefix = `conf:${Math.random().toString(36).slice(2, 10)}:`;
    const res = harness.clockResolutionMs;
    let n = 0;
    const key = () => `k${++n}`;

    const setup = async () => {
      if (!store) {
        store = counting(await harness.create());
        limiter = createLimiter({ store, policies: POLICIES, prefix, timeoutMs: 5000 });
      }
    };
    afterAll(async () => {
      await harness.close?.();
    });

    settleConformance(async () => (await setup(), store), key);

    it('starts full and takes one token at a time', async () => {
      await setup();
      const k = key();
      const peek = await limiter.peek('five', k);
      expect(peek).toMatchObject({ allowed: true, limit: 5, remaining: 5, resetAfterMs: 0, retryAfterMs: 0, waitMs: 0 });
      const d = await limiter.take('five', k);
      expect(d).toMatchObject({ allowed: true, limit: 5, remaining: 4, retryAfterMs: 0, waitMs: 0 });
      expect(d.resetAfterMs).toBeGreaterThan(1000 - 50);
      expect(d.resetAfterMs).toBeLessThanOrEqual(1000);
      expect(d.reason).toBeUndefined();
    });

    it('refills exactly at 1/30 per second: retryAfterMs and resetAfterMs bracket the elapsed store time', async () => {
      await setup();
      const k = key();
      const t0 = performance.now();
      expect((await limiter.take('slow', k, { cost: 2 })).allowed).toBe(true);
      const d = await limiter.take('slow', k);
      const t2 = performance.now();
      expect(d.allowed).toBe(false);
      expect(d.remaining).toBe(0);
      // One token takes exactly 30 000 ms; at most t2 - t0 ms of store time has passed since the bucket emptied.
      expect(d.retryAfterMs).toBeLessThanOrEqual(30_000);
      expect(d.retryAfterMs).toBeGreaterThanOrEqual(30_000 - Math.ceil(t2 - t0) - Math.ceil(res));
      expect(d.resetAfterMs).toBeLessThanOrEqual(60_000);
      expect(d.resetAfterMs).toBeGreaterThanOrEqual(60_000 - Math.ceil(t2 - t0) - Math.ceil(res));
      expect(Math.abs(d.resetAfterMs! - d.retryAfterMs - 30_000)).toBeLessThanOrEqual(1);
    });

    it('refills exactly at 1000 per second', async () => {
      await setup();
      const k = key();
      const t0 = performance.now();
      expect((await limiter.take('fast', k, { cost: 10 })).remaining).toBe(0);
      const t1 = performance.now();
      await sleep(4);
      const t2 = performance.now();
      const p = await limiter.peek('fast', k);
      const t3 = performance.now();
      // One token per ms: the tokens back are the store's elapsed ms, which lies in [t2 - t1, t3 - t0].
      expect(p.remaining).toBeGreaterThanOrEqual(Math.min(10, Math.floor(t2 - t1 - res)));
      expect(p.remaining).toBeLessThanOrEqual(Math.min(10, Math.ceil(t3 - t0 + res)));
      await sleep(15);
      expect((await limiter.peek('fast', k)).remaining).toBe(10);
    });

    it('takes a cost above 1, and a denial consumes nothing', async () => {
      await setup();
      const k = key();
      const t0 = performance.now();
      expect(await limiter.take('ten', k, { cost: 4 })).toMatchObject({ allowed: true, remaining: 6 });
      const denied = await limiter.take('ten', k, { cost: 7 });
      expect(denied).toMatchObject({ allowed: false, remaining: 6, waitMs: 0 });
      // 7 tokens need 1 more: about 1000 ms.
      expect(denied.retryAfterMs).toBeGreaterThanOrEqual(1000 - Math.ceil(performance.now() - t0 + res));
      expect(denied.retryAfterMs).toBeLessThanOrEqual(1000);
      expect((await limiter.peek('ten', k)).remaining).toBe(6);
      expect(await limiter.take('ten', k, { cost: 6 })).toMatchObject({ allowed: true, remaining: 0 });
      const none = await limiter.take('ten', k, { cost: 10 });
      expect(none.allowed).toBe(false);
      expect(none.retryAfterMs).toBeGreaterThanOrEqual(10_000 - Math.ceil(performance.now() - t0 + res));
      expect(none.retryAfterMs).toBeLessThanOrEqual(10_000);
    });

    it('retryAfterMs is exact on both sides: just before it is denied, at it is allowed', async () => {
      await setup();
      const k = key();
      const t0 = performance.now();
      expect((await limiter.take('half', k)).allowed).toBe(true);
      const d = await limiter.take('half', k);
      const denialAt = performance.now();
      expect(d.allowed).toBe(false);
      expect(d.retryAfterMs).toBeGreaterThanOrEqual(500 - Math.ceil(denialAt - t0 + res));
      expect(d.retryAfterMs).toBeLessThanOrEqual(500);
      // 100 ms before it is due, the token is not there yet.
      await sleepUntil(denialAt + d.retryAfterMs - 100);
      expect((await limiter.take('half', k)).allowed).toBe(false);
      const due = denialAt + d.retryAfterMs + res;
      await sleepUntil(due);
      expect((await limiter.take('half', k)).allowed).toBe(true);
    });

    it('reserves future slots FIFO and never beyond maxWaitMs', async () => {
      await setup();
      const k = key();
      const starts = [performance.now()];
      expect((await limiter.take('fifo', k)).allowed).toBe(true);
      const waits: number[] = [];
      for (let i = 0; i < 4; i++) {
        starts.push(performance.now());
        const d = await limiter.take('fifo', k, { maxWaitMs: 1000 });
        expect(d).toMatchObject({ allowed: true, remaining: 0, retryAfterMs: 0 });
        waits.push(d.waitMs);
      }
      const end = performance.now();
      // Each later reserver waits one more interval (50 ms), less the store time between the calls,
      // which is at most the client time from the start of one call to the end of the next.
      for (let i = 1; i < waits.length; i++) {
        const gap = waits[i]! - waits[i - 1]!;
        const between = (starts[i + 2] ?? end) - starts[i]!;
        expect(gap).toBeGreaterThanOrEqual(50 - Math.ceil(between + 2 * res) - 1);
        expect(gap).toBeLessThanOrEqual(51);
      }
      expect(waits[0]).toBeGreaterThanOrEqual(50 - Math.ceil(starts[2]! - starts[0]! + res) - 1);
      expect(waits[0]).toBeLessThanOrEqual(51);
      const before = await limiter.peek('fifo', k);
      // The queue reaches ~250 ms ahead of the first take: a wait shorter than what is left of it (the
      // peek says how much, less what passes before the take) cannot cover it, and nothing is taken.
      const maxWaitMs = Math.max(0, Math.floor(before.retryAfterMs / 4));
      const tooLong = await limiter.take('fifo', k, { maxWaitMs });
      expect(tooLong.allowed).toBe(false);
      expect(tooLong.waitMs).toBe(0);
      expect(tooLong.retryAfterMs).toBeGreaterThan(maxWaitMs);
      // The fourth reserver waits four intervals, less the store time since the first take (a slow
      // store under a loaded machine can spend tens of ms per call, so no fixed margin holds).
      expect(waits[3]).toBeGreaterThanOrEqual(200 - Math.ceil(end - starts[0]! + res) - 1);
      expect(waits[3]).toBeLessThanOrEqual(201);
      const after = await limiter.peek('fifo', k);
      expect(after.resetAfterMs).toBeLessThanOrEqual(before.resetAfterMs!);
    });

    describe('several limits in one step', () => {
      it('a refusal by the second limit leaves the first untouched; allowed, both are charged', async () => {
        await setup();
        const k = key();
        const d = await limiter.take('two', k, { cost: { burst: 1, sustained: 4 } });
        expect(d).toMatchObject({ allowed: true, limit: 5, remaining: 1 });
        expect(d.limits?.map((l) => [l.name, l.remaining])).toEqual([['burst', 2], ['sustained', 1]]);
        const before = store.calls;
        // sustained has 1 left: a cost of 2 there is refused, and burst keeps its 2.
        const refused = await limiter.take('two', k, { cost: { burst: 1, sustained: 2 } });
        expect(refused).toMatchObject({ allowed: false, limit: 5, remaining: 1 });
        expect(refused.limits?.map((l) => [l.name, l.remaining, l.retryAfterMs > 0])).toEqual([['burst', 2, false], ['sustained', 1, true]]);
        expect(store.calls - before).toBe(1);
        expect((await limiter.peek('two', k)).limits?.map((l) => l.remaining)).toEqual([2, 1]);
        // A plain number charges every limit: 1 of each.
        expect((await limiter.take('two', k)).limits?.map((l) => l.remaining)).toEqual([1, 0]);
        expect((await limiter.take('two', k, { cost: { burst: 1 } })).limits?.map((l) => l.remaining)).toEqual([0, 0]);
      });

      it('every limit decides together under contention: 40 concurrent takes admit exactly the smaller limit', async () => {
        await setup();
        const k = key();
        const all = await Promise.all(Array.from({ length: 40 }, () => limiter.take('two', k)));
        expect(all.filter((d) => d.allowed)).toHaveLength(3);
        expect((await limiter.peek('two', k)).limits?.map((l) => l.remaining)).toEqual([0, 2]);
      });

      it('a refund never makes a limit fuller than full; a charge beyond empty is a debt', async () => {
        await setup();
        const k = key();
        await limiter.take('two', k, { cost: { burst: 2, sustained: 2 } });
        const refunded = await limiter.adjust('two', k, { burst: -10, sustained: -1 });
        expect(refunded.limits?.map((l) => l.remaining)).toEqual([3, 4]);
        const charged = await limiter.adjust('two', k, { sustained: 7 });
        expect(charged).toMatchObject({ allowed: false, remaining: 0 });
        expect(charged.limits?.map((l) => l.remaining)).toEqual([3, 0]);
        // 3 tokens of debt beyond empty at 1/60 per second: 180 s until the limit is empty, not in debt.
        expect(charged.limits![1]!.resetAfterMs).toBeGreaterThan(8 * 60_000 - 2000);
        expect((await limiter.take('two', k, { cost: { burst: 1 } })).allowed).toBe(true);
        expect((await limiter.take('two', k, { cost: { sustained: 1 } })).allowed).toBe(false);
      });

      it('a repeated idempotency key is applied once: the first answer again, nothing charged twice', async () => {
        await setup();
        const k = key();
        const first = await limiter.take('two', k, { cost: { burst: 2, sustained: 3 }, idempotencyKey: 'op-1' });
        expect(first).toMatchObject({ allowed: true, remaining: 1 });
        const again = await limiter.take('two', k, { cost: { burst: 2, sustained: 3 }, idempotencyKey: 'op-1' });
        expect(again).toMatchObject({ allowed: true, remaining: 1, repeated: true });
        expect(again.limits).toEqual(first.limits);
        for (let i = 0; i < 2; i++) await limiter.adjust('two', k, { sustained: -2 }, { idempotencyKey: 'settle-1' });
        expect((await limiter.peek('two', k)).limits?.map((l) => l.remaining)).toEqual([1, 4]);
        await expect(limiter.take('two', k, { cost: 1, idempotencyKey: 'op-1' })).rejects.toMatchObject({ name: 'IdempotencyConflictError' });
        expect((await limiter.peek('two', k)).limits?.map((l) => l.remaining)).toEqual([1, 4]);
      });

      it('a debt delays the next take by exactly its size', async () => {
        await setup();
        const k = key();
        // Tokens refill 1 per ms: after the take of 1 request and 1000 tokens, a charge of 200 more
        // tokens is a debt of 200 ms beyond empty; a take of 1 token must wait it out, and then 1 ms more.
        const t0 = performance.now();
        expect((await limiter.take('llm', k, { cost: { requests: 1, tokens: 1000 } })).allowed).toBe(true);
        await limiter.adjust('llm', k, { tokens: 200 });
        const d = await limiter.take('llm', k, { cost: { requests: 1, tokens: 1 } });
        const elapsed = performance.now() - t0;
        expect(d.allowed).toBe(false);
        expect(d.limits?.map((l) => l.name)).toEqual(['requests', 'tokens']);
        expect(d.limits![0]!.retryAfterMs).toBe(0);
        // 201 ms from the charge, less the store time since it (at most `elapsed`), rounded up.
        expect(d.retryAfterMs).toBeLessThanOrEqual(201);
        expect(d.retryAfterMs).toBeGreaterThanOrEqual(201 - Math.ceil(elapsed + res));
        const reserved = await limiter.take('llm', k, { cost: { requests: 1, tokens: 1 }, maxWaitMs: 1000 });
        expect(reserved.allowed).toBe(true);
        expect(reserved.waitMs).toBeLessThanOrEqual(201);
        expect(reserved.waitMs).toBeGreaterThanOrEqual(201 - Math.ceil(performance.now() - t0 + res));
      });
    });

    it('is atomic: 60 concurrent takes on a bucket of 10 admit exactly 10', async () => {
      await setup();
      const k = key();
      const all = await Promise.all(Array.from({ length: 60 }, () => limiter.take('ten', k)));
      expect(all.filter((d) => d.allowed)).toHaveLength(10);
      expect(all.filter((d) => d.allowed).map((d) => d.remaining).sort((a, b) => a! - b!)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    });

    it('concurrent reservations get distinct slots one interval apart', async () => {
      await setup();
      const k = key();
      await limiter.take('fifo', k);
      const t0 = performance.now();
      const all = await Promise.all(Array.from({ length: 6 }, () => limiter.take('fifo', k, { maxWaitMs: 5000 })));
      const spread = performance.now() - t0;
      const waits = all.map((d) => d.waitMs).sort((a, b) => a - b);
      expect(all.every((d) => d.allowed)).toBe(true);
      // Slots are 50 ms apart in store time; the calls themselves were spread over `spread` ms.
      for (let i = 1; i < waits.length; i++) {
        expect(waits[i]! - waits[i - 1]!).toBeGreaterThanOrEqual(50 - spread - 1 - res);
        expect(waits[i]! - waits[i - 1]!).toBeLessThanOrEqual(51);
      }
      expect(waits[waits.length - 1]! - waits[0]!).toBeGreaterThanOrEqual(250 - spread - 1 - res);
    });

    it('peek is allowed only when a take of 1 would pass now: not on an empty bucket, nor under a reservation', async () => {
      await setup();
      const k = key();
      const t0 = performance.now();
      expect((await limiter.take('half', k)).allowed).toBe(true);
      const empty = await limiter.peek('half', k);
      const elapsed = performance.now() - t0;
      expect(empty).toMatchObject({ allowed: false, remaining: 0, waitMs: 0 });
      // One token takes 500 ms; the store has aged the bucket by at most the elapsed time.
      expect(empty.retryAfterMs).toBeLessThanOrEqual(500);
      expect(empty.retryAfterMs).toBeGreaterThanOrEqual(500 - Math.ceil(elapsed) - Math.ceil(res));
      // The peek agrees with the take that follows it.
      expect((await limiter.take('half', k)).allowed).toBe(false);
      const reserved = await limiter.take('half', k, { maxWaitMs: 1000 });
      expect(reserved.allowed).toBe(true);
      expect((await limiter.peek('half', k)).allowed).toBe(false);
      const fresh = await limiter.peek('half', key());
      expect(fresh).toMatchObject({ allowed: true, remaining: 1, retryAfterMs: 0 });
    });

    it('a policy at the bucket cap (1e9 tokens, 0.5/s) decides, denies and expires exactly', async () => {
      await setup();
      const k = key();
      const t0 = performance.now();
      const all = await limiter.take('huge', k, { cost: 1e9 });
      expect(all).toMatchObject({ allowed: true, remaining: 0, waitMs: 0, resetAfterMs: 2e12 });
      const denied = await limiter.take('huge', k);
      const elapsedMs = performance.now() - t0;
      expect(denied.allowed).toBe(false);
      // One token is 2000 ms away, less the store time since the bucket emptied: no float slack.
      expect(denied.retryAfterMs).toBeGreaterThanOrEqual(2000 - Math.ceil(elapsedMs) - res);
      expect(denied.retryAfterMs).toBeLessThanOrEqual(2000);
      if (harness.expiryMs) {
        const ttl = await harness.expiryMs(`${prefix}huge:${k}`);
        expect(ttl).not.toBeNull();
        expect(ttl!).toBeGreaterThan(2e12 - 10_000);
        expect(ttl!).toBeLessThanOrEqual(2e12 + 1);
      }
    });

    it('peek consumes nothing and reset refills', async () => {
      await setup();
      const k = key();
      await limiter.take('ten', k, { cost: 3 });
      expect((await limiter.peek('ten', k)).remaining).toBe(7);
      expect((await limiter.peek('ten', k)).remaining).toBe(7);
      await limiter.reset('ten', k);
      expect((await limiter.peek('ten', k)).remaining).toBe(10);
    });

    if (harness.expiryMs) {
      const expiryMs = harness.expiryMs.bind(harness);
      it('sets an expiry on every written bucket, equal to the time until it is full again', async () => {
        await setup();
        const k = key();
        const d = await limiter.take('ten', k, { cost: 3 });
        const ttl = await expiryMs(`${prefix}ten:${k}`);
        expect(ttl).not.toBeNull();
        expect(ttl!).toBeGreaterThan(d.resetAfterMs! - 200);
        expect(ttl!).toBeLessThanOrEqual(d.resetAfterMs! + 1);
      });
    }

    it('rejects invalid input with documented errors and sends nothing to the store', async () => {
      await setup();
      const before = store.calls;
      const k = key();
      for (const cost of [0, -1, 1.5, 11, Number.NaN, Infinity, 1e309, '1' as unknown as number]) {
        await expect(limiter.take('ten', k, { cost })).rejects.toBeInstanceOf(InvalidInputError);
        await expect(limiter.take('ten', k, { cost })).rejects.toBeInstanceOf(RangeError);
      }
      for (const bad of ['', 'x'.repeat(513), 'é'.repeat(257), '\ud800', 42, null, { $gt: '' }]) {
        await expect(limiter.take('ten', bad as string)).rejects.toMatchObject({ field: 'key' });
      }
      await expect(limiter.take('ten', 'é'.repeat(256))).resolves.toMatchObject({ allowed: true });
      await expect(limiter.take('ten', k, { maxWaitMs: -1 })).rejects.toMatchObject({ field: 'maxWaitMs' });
      await expect(limiter.take('ten', k, { maxWaitMs: 0.5 })).rejects.toMatchObject({ field: 'maxWaitMs' });
      await expect(limiter.take('nope' as 'ten', k)).rejects.toBeInstanceOf(UnknownPolicyError);
      expect(store.calls).toBe(before + 1);
      expect((await limiter.peek('ten', k)).remaining).toBe(10);
    });

    it('accepts any UTF-8 key, including $, dots, braces, NUL, RTL and emoji, as distinct buckets', async () => {
      await setup();
      const keys = ['$gt', 'a.b', '{}', 'a\u0000b', '\u05e9\u05dc\u05d5\u05dd', '🦄🚀', `${n}:${n}`, ' '];
      for (const k of keys) expect((await limiter.take('ten', `${prefix}${k}`, { cost: 10 })).allowed).toBe(true);
      for (const k of keys) expect((await limiter.peek('ten', `${prefix}${k}`)).remaining).toBe(0);
    });

    describe('override records (Store.override): limits changed at runtime, blocks', () => {
      overrideConformance({
        store: async () => (await setup(), store),
        prefix,
        key,
        clockResolutionMs: res,
        ...(harness.expiryMs ? { expiryMs: harness.expiryMs.bind(harness) } : {}),
      });
    });

    describe('token leases (PolicyConfig.lease) on this store', () => {
      const LEASED = {
        // No refill within a test (one token per 30 s), so every count below is exact.
        still: { capacity: 20, refillPerSecond: 1 / 30, lease: { tokens: 8, maxAgeMs: 60_000 } },
        partial: { capacity: 5, refillPerSecond: 1 / 30, lease: { tokens: 5, maxAgeMs: 60_000 } },
        // maxAgeMs well above a store call on a loaded machine (a Durable Object in workerd has taken
        // over 40 ms), so the grant is still held when the test reads it.
        aging: { capacity: 10, refillPerSecond: 1 / 30, lease: { tokens: 5, maxAgeMs: 400 } },
        fresh: { capacity: 10, refillPerSecond: 1 / 30 },
      } satisfies Record<string, PolicyConfig>;
      const nodes = (count: number) => Array.from({ length: count }, () => createLimiter({ store, policies: LEASED, prefix, timeoutMs: 5000 }));

      it('3 nodes x 30 concurrent takes on a bucket of 20 admit exactly 20; close() gives the unused back', async () => {
        await setup();
        const k = key();
        const [a, b, c] = nodes(3);
        const before = store.calls;
        const got = await Promise.all([a!, b!, c!].flatMap((l) => Array.from({ length: 30 }, () => l.take('still', k))));
        expect(got.filter((d) => d.allowed)).toHaveLength(20);
        // Per node: a plain take (a key's first), a grant that the takes it covers wait for, and plain
        // takes for the rest (a take never queues behind grants): fewer calls than takes, all in one go.
        expect(store.calls - before).toBeLessThan(90);
        expect((await a!.take('still', k)).allowed).toBe(false); // a grant finds the store empty...
        expect((await a!.take('still', k)).reason).toBe('lease'); // ...so the next refusal is local
        for (const l of [a!, b!, c!]) await l.close();
        expect((await c!.peek('still', k)).remaining).toBe(0);
        // A node that used 1 of its grant gives 7 back on close.
        const k2 = key();
        const [d] = nodes(1);
        expect((await d!.take('still', k2)).allowed).toBe(true); // a key's first take is a plain one
        expect((await d!.take('still', k2)).allowed).toBe(true); // then a grant of 8
        expect((await d!.peek('still', k2)).remaining).toBe(11);
        await d!.close();
        expect((await d!.peek('still', k2)).remaining).toBe(18);
      });

      it('a grant takes what exists (partial), and refunds never make a bucket fuller than full', async () => {
        await setup();
        const k = key();
        const [a] = nodes(1);
        expect((await a!.take('partial', k, { cost: 2 })).allowed).toBe(true); // plain: 3 left
        expect((await a!.take('partial', k, { cost: 2 })).allowed).toBe(true); // a grant of the 3 (partial)
        expect((await a!.peek('partial', k)).remaining).toBe(0);
        expect(await a!.take('partial', k, { cost: 4 })).toMatchObject({ allowed: false, remaining: 1 });
        await a!.reset('partial', k); // full again; the lease is dropped without a refund
        const [b] = nodes(1);
        await b!.take('partial', k);
        await b!.take('partial', k); // a grant of 5, 4 left in the lease
        await store.reset(`${prefix}partial:${k}`); // full behind the lease's back
        await b!.close(); // refunds 4 to a full bucket
        expect((await b!.peek('partial', k)).remaining).toBe(5);
      });

      it('unused tokens go back when their grant ages out', async () => {
        await setup();
        const k = key();
        const [a] = nodes(1);
        await a!.take('aging', k);
        await a!.take('aging', k); // a grant of 5
        expect((await a!.peek('aging', k)).remaining).toBe(4);
        await sleep(420);
        await a!.take('aging', key()); // a decision on a leased policy ages the oldest leases out
        await sleep(20);
        expect((await a!.peek('aging', k)).remaining).toBe(8);
        await a!.close();
      });
    });
  });
}
