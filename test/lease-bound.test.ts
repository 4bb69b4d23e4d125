// The stated bound of token leases, checked in every window of a run, not in totals: nodes (limiters)
// on one memory store, all on one fake clock (store clock, monotonic clock and timers). Over any window
// of length T, admitted ≤ capacity + refillPerSecond × (T + U), with the usable age
// U = min(maxAgeMs, tokens / refillPerSecond); and no node ever holds more than `tokens` of a key,
// its grant in flight included.
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLimiter, memoryStore, type LimitConfig, type Limiter, type PolicyConfig, type Store } from '../src/index.js';

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
});
afterEach(() => {
  vi.useRealTimers();
});

const flush = () => new Promise((r) => setImmediate(r));

/** The usable age in ms, as docs/leases.md states it. */
/** A policy of one limit with a lease, as these tests write it. */
type LeasedPolicy = PolicyConfig & LimitConfig;

const usableAgeMs = (p: LeasedPolicy) => Math.min(p.lease!.maxAgeMs, (p.lease!.tokens * 1000) / p.refillPerSecond);

/**
 * The worst excess over the bound among all windows [t_i, t_j] of the admissions (time, cost): 0 when
 * every window admits at most capacity + rate × (T + U).
 */
function worstWindow(admitted: { atMs: number; cost: number }[], p: LeasedPolicy): number {
  const a = [...admitted].sort((x, y) => x.atMs - y.atMs);
  const u = usableAgeMs(p);
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    let sum = 0;
    for (let j = i; j < a.length; j++) {
      sum += a[j]!.cost;
      const bound = Math.floor(p.capacity + (p.refillPerSecond * (a[j]!.atMs - a[i]!.atMs + u)) / 1000 + 1e-9);
      worst = Math.max(worst, sum - bound);
    }
  }
  return worst;
}

interface Cluster {
  clock: { now: number };
  nodes: Limiter[];
  admitted: { atMs: number; cost: number }[];
  /** Grants whose size plus what the node held exceeded tokens. */
  overHeld: { node: number; asked: number; held: number }[];
  advance(ms: number): void;
  take(node: number, cost?: number): Promise<boolean>;
  /** close() on a node, and a new process in its place (the key is cold there again). */
  restart(node: number): Promise<void>;
}

function cluster(policy: PolicyConfig, count: number): Cluster {
  const clock = { now: 1_790_000_000_000 };
  const inner = memoryStore({ nowMs: () => clock.now });
  const c: Cluster = {
    clock,
    nodes: [],
    admitted: [],
    overHeld: [],
    advance(ms) {
      clock.now += ms;
      vi.advanceTimersByTime(ms);
    },
    async take(node, cost = 1) {
      const d = await c.nodes[node]!.take('p', 'k', { cost });
      if (d.allowed) c.admitted.push({ atMs: clock.now, cost });
      return d.allowed;
    },
    async restart(node) {
      await c.nodes[node]!.close();
      c.nodes[node] = make(node);
    },
  };
  function make(index: number): Limiter {
    // Each node's store calls go through its own wrapper, which sees every grant as it is asked for.
    const store: Store = {
      name: 'memory',
      step(key, args) {
        if (args.tokenUnits !== undefined) {
          const asked = args.limits[0]!.costUnits / args.tokenUnits;
          const held = c.nodes[index]!.stats().leases.tokens;
          if (asked + held > policy.lease!.tokens) c.overHeld.push({ node: index, asked, held });
        }
        return inner.step(key, args);
      },
      reset: (key) => inner.reset(key),
      ping: async () => {},
    };
    return createLimiter({ store, policies: { p: policy }, monotonicMs: () => clock.now });
  }
  for (let i = 0; i < count; i++) c.nodes.push(make(i));
  return c;
}

describe('token leases: the window bound', () => {
  it('the issue: capacity 1000 at 1000/s, leases of 100; a node never holds more than 100, and 1.5 s later no instant admits more than 1000 + 100', async () => {
    const policy: PolicyConfig = { capacity: 1000, refillPerSecond: 1000, lease: { tokens: 100, maxAgeMs: 2000 } };
    const c = cluster(policy, 2);
    for (let i = 0; i < 60; i++) {
      await c.take(0);
      await flush();
      expect(c.nodes[0]!.stats().leases.tokens).toBeLessThanOrEqual(100);
    }
    expect(c.overHeld).toEqual([]);
    c.advance(1500);
    let atInstant = 0;
    for (let i = 0; i < 1000; i++) if (await c.take(1)) atInstant++;
    for (let i = 0; i < 200; i++) if (await c.take(0)) atInstant++;
    // Before: node A held 141 tokens, all still answered 1.5 s later, on top of B's 1000 (1141).
    expect(atInstant).toBeLessThanOrEqual(1000 + 100);
    expect(worstWindow(c.admitted, policy)).toBe(0);
  });

  it('a burst right after a refill: tokens leased before it are no longer answered once past the usable age', async () => {
    // 100 tokens at 1000/s: U = min(2000, 100 ms) = 100 ms.
    const policy: PolicyConfig = { capacity: 100, refillPerSecond: 1000, lease: { tokens: 100, maxAgeMs: 2000 } };
    const c = cluster(policy, 2);
    await c.take(0, 100); // plain (first sight): the bucket is empty, node A's demand is 100
    c.advance(100);
    await c.take(0); // A: a grant of 100 (the refill), one used: A holds 99
    expect(c.nodes[0]!.stats().leases.tokens).toBe(99);
    c.advance(100); // the bucket is full again behind A's lease
    expect(c.nodes[0]!.stats().leases.tokens).toBe(0); // A's grant is 100 ms old: no longer usable
    let burst = 0;
    for (let i = 0; i < 150; i++) if (await c.take(1)) burst++;
    for (let i = 0; i < 150; i++) if (await c.take(0)) burst++;
    expect(burst).toBe(100);
    expect(worstWindow(c.admitted, policy)).toBe(0);
  });

  it('a refund gives back only what the bucket has not refilled since the grant, so tokens cannot pass from lease to lease and arrive later and later', async () => {
    // 100 tokens at 100/s: U = 1 s. Each time a grant ages out (its refund), a fresh node takes the
    // refund into a lease and holds it; and each usable age a fresh node takes the refill. With a full
    // refund, the same tokens pass from lease to lease, each time usable for another U, and the leases
    // of the last round all hold tokens at once: 287 tokens at one instant against the bound of 200.
    const policy: PolicyConfig = { capacity: 100, refillPerSecond: 100, lease: { tokens: 100, maxAgeMs: 5000, lowWater: 0 } };
    const c = cluster(policy, 16);
    await c.take(15, 100); // drains the bucket (plain: its first sight)
    for (let n = 0; n < 15; n++) await c.take(n, 100); // every other node's first sight: refused, demand 100
    let fresh = 0;
    /** A fresh node takes what the store has into a lease and holds it (one token used). */
    const grab = async (atMs: number) => {
      const n = fresh++;
      c.advance(atMs - 5 - c.clock.now);
      await c.take(n, 100); // refused (the store is empty): this node's demand is 100 now
      c.advance(atMs - c.clock.now);
      await c.take(n);
    };
    const start = c.clock.now;
    let refill = start + 1000 - 20;
    let expiries: number[] = [];
    for (let round = 0; round < 4; round++) {
      await grab(refill);
      const next = [refill + 1000];
      for (const e of expiries) {
        await grab(e); // the grant made 1 s ago ages out here (its timer refunds), and is taken again
        next.push(e + 1000);
      }
      expiries = next;
      refill += 1000 - 20;
    }
    for (let n = 0; n < 16; n++) while (await c.take(n)) {}
    expect(worstWindow(c.admitted, policy)).toBe(0);
  });

  it('any interleaving of nodes, costs, pauses and restarts: every window within the bound, no node above tokens', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 4 }),
        fc.integer({ min: 5, max: 100 }),
        fc.integer({ min: 1, max: 1000 }),
        fc.integer({ min: 1, max: 100 }),
        fc.integer({ min: 1, max: 400 }),
        fc.array(
          fc.record({ node: fc.nat(3), dtMs: fc.integer({ min: 0, max: 60 }), takes: fc.integer({ min: 0, max: 40 }), cost: fc.oneof(fc.integer({ min: 1, max: 3 }), fc.constant(Infinity)), restart: fc.integer({ min: 0, max: 9 }) }),
          { minLength: 20, maxLength: 120 },
        ),
        async (count, capacity, rate, tokensPick, maxAgeMs, ops) => {
          const tokens = Math.min(tokensPick, capacity);
          const policy: PolicyConfig = { capacity, refillPerSecond: rate, lease: { tokens, maxAgeMs } };
          const c = cluster(policy, count);
          for (const op of ops) {
            c.advance(op.dtMs);
            const node = op.node % count;
            if (op.restart === 0) await c.restart(node);
            for (let i = 0; i < op.takes; i++) await c.take(node, Math.min(op.cost, tokens));
            await flush();
          }
          for (let n = 0; n < count; n++) while (await c.take(n)) {}
          expect(c.overHeld).toEqual([]);
          expect(worstWindow(c.admitted, policy)).toBe(0);
        },
      ),
      { numRuns: 200 },
    );
  });
});
