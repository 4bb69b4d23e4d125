// The settlement part of the store conformance suite (./conformance.ts runs it on every store): a
// settlement of a charge (limiter.settle) refunds at most what that charge took, applies once (a
// repeat answers the first settlement; another cost is a conflict), and stays exact when its answer is
// lost and it is sent again, and when two limiters on the one store settle the same charge at once.
import { describe, expect, it } from 'vitest';
import { createLimiter, IdempotencyConflictError, InvalidInputError, StoreError, UnknownChargeError, type Limiter, type Store } from '../../src/index.js';

export const SETTLE_POLICIES = {
  // Refills 1 token per 30 s: nothing comes back within a test.
  slow: { capacity: 2, refillPerSecond: 1 / 30 },
  two: { limits: { burst: { capacity: 3, refillPerSecond: 1 / 30 }, sustained: { capacity: 5, refillPerSecond: 1 / 60 } } },
} as const;

type Policies = keyof typeof SETTLE_POLICIES;

/** A store that runs each step, then loses the answer of the next `drops` steps (the step was applied). */
function dropping(store: Store): Store & { drops: number } {
  const s = {
    name: store.name,
    drops: 0,
    async step(k: string, a: Parameters<Store['step']>[1], o?: Parameters<Store['step']>[2]) {
      const r = await store.step(k, a, o);
      if (s.drops > 0) {
        s.drops--;
        throw new Error('ECONNRESET: the answer was lost');
      }
      return r;
    },
    reset: (k: string) => store.reset(k),
    ping: () => store.ping(),
  };
  return s;
}

/**
 * The settlement tests, inside a store's conformance describe: `open()` gives the suite's store (made
 * once), `key()` a fresh key each time.
 */
export function settleConformance(open: () => Promise<Store>, key: () => string): void {
  describe('settlements bounded by the charge', () => {
    let limiter: Limiter<Policies> | undefined;
    let store: Store;
    const prefix = `settle:${Math.random().toString(36).slice(2, 10)}:`;
    const setup = async () => {
      store ??= await open();
      limiter ??= createLimiter({ store, policies: SETTLE_POLICIES, prefix, timeoutMs: 5000 });
      return limiter;
    };
    const remaining = async (l: Limiter<Policies>, policy: Policies, k: string) => {
      const d = await l.peek(policy, k);
      return d.limits ? d.limits.map((x) => x.remaining) : d.remaining;
    };

    it('refunds at most what the charge took, once: a repeat changes nothing, another cost is a conflict, a negative cost is refused', async () => {
      const l = await setup();
      const k = key();
      const taken = await l.take('slow', k, { cost: 2, idempotencyKey: 'c1' });
      expect(taken).toMatchObject({ allowed: true, remaining: 0, charge: 'c1' });
      const settled = await l.settle('slow', k, { charge: 'c1', cost: 0 });
      expect(settled.remaining).toBe(2);
      expect(settled.repeated).toBeUndefined();
      // Empty it again; settling the same charge again gives the first answer and refunds nothing.
      expect((await l.take('slow', k, { cost: 2 })).allowed).toBe(true);
      expect(await l.settle('slow', k, { charge: 'c1', cost: 0 })).toMatchObject({ repeated: true, remaining: 2 });
      expect(await remaining(l, 'slow', k)).toBe(0);
      const conflict = await l.settle('slow', k, { charge: 'c1', cost: 1 }).catch((e: unknown) => e);
      expect(conflict).toBeInstanceOf(IdempotencyConflictError);
      expect(conflict).toMatchObject({ field: 'charge' });
      await expect(l.settle('slow', k, { charge: 'c1', cost: -1 })).rejects.toBeInstanceOf(InvalidInputError);
      await expect(l.settle('slow', k, { charge: 'c1', cost: -1 })).rejects.not.toBeInstanceOf(IdempotencyConflictError);
      expect(await remaining(l, 'slow', k)).toBe(0);
    });

    it('reset forgets the bucket, not the operation ids: a retried take is a repeat, and a charge made before can still be settled (review 9, F2)', async () => {
      const l = await setup();
      const k = key();
      expect(await l.take('slow', k, { cost: 1, idempotencyKey: 'before-reset' })).toMatchObject({ allowed: true, remaining: 1 });
      expect((await l.take('slow', k, { cost: 1, idempotencyKey: 'charge-before-reset' })).allowed).toBe(true);
      await l.reset('slow', k);
      // The retry answers the first decision and takes nothing.
      expect(await l.take('slow', k, { cost: 1, idempotencyKey: 'before-reset' })).toMatchObject({ allowed: true, repeated: true, remaining: 1 });
      expect(await remaining(l, 'slow', k)).toBe(2);
      // The charge is known: settled at 0 on the full bucket, it gives back nothing past full.
      expect(await l.settle('slow', k, { charge: 'charge-before-reset', cost: 0 })).toMatchObject({ remaining: 2 });
      expect((await l.take('slow', k, { cost: 1 })).allowed).toBe(true);
      expect(await l.settle('slow', k, { charge: 'charge-before-reset', cost: 0 })).toMatchObject({ repeated: true });
      expect(await remaining(l, 'slow', k)).toBe(1);
    });

    it('a charge nobody took, or taken on another key, is an UnknownChargeError and changes nothing', async () => {
      const l = await setup();
      const k = key();
      await l.take('slow', k, { cost: 1, idempotencyKey: 'mine' });
      await expect(l.settle('slow', k, { charge: 'never-taken', cost: 0 })).rejects.toBeInstanceOf(UnknownChargeError);
      await expect(l.settle('slow', key(), { charge: 'mine', cost: 0 })).rejects.toBeInstanceOf(UnknownChargeError);
      // An adjustment's id names no charge.
      await l.adjust('slow', k, 1, { idempotencyKey: 'an-adjustment' });
      await expect(l.settle('slow', k, { charge: 'an-adjustment', cost: 0 })).rejects.toBeInstanceOf(UnknownChargeError);
      expect(await remaining(l, 'slow', k)).toBe(0);
      // Nothing was recorded for the failed settlements: the charge settles normally afterwards.
      expect((await l.settle('slow', k, { charge: 'mine', cost: 0 })).remaining).toBe(1);
    });

    it("a refused take's charge took nothing, so its settlement refunds nothing; a cost above the charge charges the rest", async () => {
      const l = await setup();
      const k = key();
      await l.take('slow', k, { cost: 2 });
      const refused = await l.take('slow', k, { cost: 1, idempotencyKey: 'refused' });
      expect(refused).toMatchObject({ allowed: false, charge: 'refused' });
      expect((await l.settle('slow', k, { charge: 'refused', cost: 0 })).remaining).toBe(0);
      const k2 = key();
      await l.take('slow', k2, { cost: 1, idempotencyKey: 'under' });
      expect((await l.settle('slow', k2, { charge: 'under', cost: 3 })).remaining).toBe(0);
      // 2 tokens of debt beyond... capacity 2: a take of 1 now waits out the extra token charged.
      expect((await l.take('slow', k2, { cost: 1 })).allowed).toBe(false);
    });

    it('a refund while another caller\'s reservation is pending gives back only what the reservation does not hold (review 5, O1)', async () => {
      const l = await setup();
      const k = key();
      // slow: 2 at one per 30 s. X0 takes both; X1 reserves both, due 60 s from now.
      expect(await l.take('slow', k, { cost: 2, idempotencyKey: 'x0' })).toMatchObject({ allowed: true });
      const x1 = await l.take('slow', k, { cost: 2, maxWaitMs: 120_000, idempotencyKey: 'x1' });
      expect(x1).toMatchObject({ allowed: true });
      expect(x1.waitMs).toBeGreaterThan(59_000);
      // X0 used nothing. Its 2 would let the next take come 60 s early, on top of X1's 2 at its slot.
      await l.settle('slow', k, { charge: 'x0', cost: 0 });
      const next = await l.take('slow', k, { cost: 1, maxWaitMs: 200_000 });
      expect(next).toMatchObject({ allowed: true });
      expect(next.waitMs).toBeGreaterThan(x1.waitMs + 29_000);
      // What the reservation does not hold (a charge beyond it) is given back whole.
      const k2 = key();
      await l.take('slow', k2, { cost: 2 });
      const y = await l.take('slow', k2, { cost: 2, maxWaitMs: 120_000 });
      await l.adjust('slow', k2, 2);
      await l.adjust('slow', k2, -2);
      const after = await l.take('slow', k2, { cost: 1, maxWaitMs: 200_000 });
      expect(after.waitMs).toBeGreaterThan(y.waitMs + 29_000);
      expect(after.waitMs).toBeLessThan(y.waitMs + 31_000);
    });

    it('per limit: each limit gets back at most what the charge took from it; a limit not named cost 0', async () => {
      const l = await setup();
      const k = key();
      await l.take('two', k, { cost: { burst: 2, sustained: 3 }, idempotencyKey: 'multi' });
      expect(await remaining(l, 'two', k)).toEqual([1, 2]);
      // burst not named: actual 0, its 2 go back; sustained actual 5: 2 more charged.
      expect((await l.settle('two', k, { charge: 'multi', cost: { sustained: 5 } })).limits?.map((x) => x.remaining)).toEqual([3, 0]);
      expect(await remaining(l, 'two', k)).toEqual([3, 0]);
    });

    it('the take-then-refund loop: settling one charge 100 times gives back that one charge, and capacity 2 admits 2 of 100', async () => {
      const l = await setup();
      const k = key();
      expect((await l.take('slow', k, { cost: 1, idempotencyKey: 'once' })).allowed).toBe(true);
      let admitted = 0;
      for (let i = 0; i < 100; i++) {
        if ((await l.take('slow', k)).allowed) admitted++;
        await l.settle('slow', k, { charge: 'once', cost: 0 });
        await l.settle('slow', k, { charge: 'once', cost: -1 }).catch(() => {});
      }
      // The bucket's 1 token left, plus the 1 the settlement of 'once' gave back: 2 of 100.
      expect(admitted).toBe(2);
    });

    it('a lost answer then a retry applies once, and two limiters settling one charge at once apply it once', async () => {
      const l = await setup();
      const k = key();
      await l.take('slow', k, { cost: 2, idempotencyKey: 'retried' });
      const lossy = dropping(store);
      const other = createLimiter({ store: lossy, policies: SETTLE_POLICIES, prefix, timeoutMs: 5000, circuitBreaker: false });
      lossy.drops = 1;
      await expect(other.settle('slow', k, { charge: 'retried', cost: 1 })).rejects.toBeInstanceOf(StoreError);
      expect(await remaining(l, 'slow', k)).toBe(1);
      expect(await other.settle('slow', k, { charge: 'retried', cost: 1 })).toMatchObject({ repeated: true, remaining: 1 });
      expect(await remaining(l, 'slow', k)).toBe(1);

      const k2 = key();
      await l.take('slow', k2, { cost: 2, idempotencyKey: 'raced' });
      const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? l : other).settle('slow', k2, { charge: 'raced', cost: 0 })));
      expect(answers.filter((d) => !d.repeated)).toHaveLength(1);
      expect(await remaining(l, 'slow', k2)).toBe(2);
    });
  });
}
