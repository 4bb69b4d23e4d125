// A policy-wide change (limiter.setPolicyLimits) on a store that two nodes share: two limiters, each
// with its own ioredis connection, on one real redis-server (issue 31; the cold review's scripts
// redis-pw.ts and redis-pw4.ts). The change set without expiresInMs lasts until it is cleared (it ended
// by itself about a second later: the policy's record was written with PX 1000), and one with an end
// lasts until then. While one node has read a change and the other has not (up to policyRefreshMs),
// alternating requests used to hop a key between the two numbers on every step (the clamp to the lower
// capacity, carried back, admitted thousands in 2 s on capacity 10). Changes are ordered now (41ade5e):
// the key moves once, at its first step under the newer view, and the node that has not read the change
// yet decides under what the key holds; never more is admitted than the newer numbers allow.
import { Redis as IORedis } from 'ioredis';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createLimiter, type Decision, type Limiter } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis.js';

// Nothing refills within a test (0.03 of a token in 3 s): every admission is one of the capacity's.
const SLOW = 0.01;
// B reads the record again only once its reading is half this old: it stays stale through every window here.
const REFRESH_MS = 10_000;

const clients: IORedis[] = [];
const limiters: Limiter<'p'>[] = [];
afterAll(async () => {
  for (const l of limiters) await l.close();
  for (const c of clients) c.disconnect();
});

let run = 0;
/** A fresh key prefix, so that tests (and runs) share nothing in Redis. */
const newPrefix = () => `pws${run++}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}:`;

/** A node: a limiter on its own connection to the shared redis-server. */
function node(prefix: string, capacity: number, policyRefreshMs = REFRESH_MS): Limiter<'p'> {
  const client = new IORedis(inject('redisUrl'));
  clients.push(client);
  const limiter = createLimiter({ store: redisStore({ client }), prefix, policies: { p: { capacity, refillPerSecond: SLOW } }, policyRefreshMs });
  limiters.push(limiter);
  return limiter;
}

/** Redis's own view of a key's expiry (ms; -1 none, -2 no key). */
async function pttl(key: string): Promise<number> {
  const c = new IORedis(inject('redisUrl'));
  try {
    return await c.pttl(key);
  } finally {
    c.disconnect();
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Hop {
  node: 'A' | 'B';
  d: Decision;
}

/** Takes on `key` through a and b in turn, one at a time: `count` of them, or for `forMs`. */
async function alternate(a: Limiter<'p'>, b: Limiter<'p'>, key: string, until: { count?: number; forMs?: number }): Promise<Hop[]> {
  const hops: Hop[] = [];
  const end = performance.now() + (until.forMs ?? Infinity);
  while (hops.length < (until.count ?? Infinity) && performance.now() < end) {
    const which = hops.length % 2 === 0 ? 'A' : 'B';
    hops.push({ node: which, d: await (which === 'A' ? a : b).take('p', key) });
  }
  return hops;
}
const admitted = (hops: Hop[], which?: 'A' | 'B') => hops.filter((h) => h.d.allowed && (which === undefined || h.node === which)).length;
const limitsOf = (hops: Hop[], which: 'A' | 'B') => new Set(hops.filter((h) => h.node === which).map((h) => h.d.limit));

describe('setPolicyLimits on Redis lasts until it is cleared, or until its expiresInMs', () => {
  it('without expiresInMs, idle: after 3 s with no traffic it is still in force, on the node that set it and on a new one; its record has no expiry', { timeout: 30_000 }, async () => {
    const prefix = newPrefix();
    const a = node(prefix, 10, 1000);
    await a.take('p', 'warm');
    expect(await a.setPolicyLimits('p', { capacity: 2, refillPerSecond: SLOW })).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 2 }] });
    await sleep(3000);
    // Its reading is 3 s old (policyRefreshMs 1000): this decision reads the record again first.
    expect(await a.take('p', 'k')).toMatchObject({ allowed: true, limit: 2, remaining: 1 });
    const got = await a.getPolicyLimits('p');
    expect(got).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 2 }] });
    expect(got).not.toHaveProperty('expiresInMs');
    // A node that starts now reads it on its first decision.
    expect((await node(prefix, 10, 1000).take('p', 'new-node')).limit).toBe(2);
    expect(await pttl(`${prefix}p*`)).toBe(-1);
    // Cleared, it ends: the record is the marker of the revert (its version, no numbers), kept with no
    // expiry as the change was, and the policy's numbers decide again.
    await a.clearPolicyLimits('p');
    expect(await pttl(`${prefix}p*`)).toBe(-1);
    expect(await a.getPolicyLimits('p')).toMatchObject({ source: 'policy', limits: [{ capacity: 10 }] });
    expect((await a.take('p', 'after-clear')).limit).toBe(10);
  });

  it('without expiresInMs, busy: every decision of 3 s of traffic is made under it, and each key admits the new capacity once', { timeout: 30_000 }, async () => {
    const prefix = newPrefix();
    const a = node(prefix, 10, 1000);
    await a.take('p', 'warm');
    await a.setPolicyLimits('p', { capacity: 2, refillPerSecond: SLOW });
    // Takes on 7 keys for 3 s, every one decided under capacity 2.
    const start = performance.now();
    const traffic: Decision[] = [];
    for (let i = 0; performance.now() - start < 3000; i++) {
      traffic.push(await a.take('p', `k${i % 7}`));
      await sleep(5);
    }
    expect(traffic.length).toBeGreaterThan(100);
    expect(new Set(traffic.map((d) => d.limit))).toEqual(new Set([2]));
    // Each of the 7 keys admitted its 2, and not one more.
    expect(traffic.filter((d) => d.allowed)).toHaveLength(14);
    expect(await a.getPolicyLimits('p')).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 2 }] });
    expect((await node(prefix, 10, 1000).take('p', 'new-node')).limit).toBe(2);
    expect(await pttl(`${prefix}p*`)).toBe(-1);
  });

  it('with expiresInMs 5000: in force until then, and not after; its record stays past its end (no PTTL), so a node that read an older change learns it has ended (review 9, F1)', { timeout: 30_000 }, async () => {
    const prefix = newPrefix();
    const a = node(prefix, 10, 1000);
    await a.take('p', 'warm');
    const t0 = performance.now();
    const set = await a.setPolicyLimits('p', { capacity: 2, refillPerSecond: SLOW }, { expiresInMs: 5000 });
    expect(set).toMatchObject({ source: 'policy-wide', expiresInMs: 5000 });
    expect(await pttl(`${prefix}p*`)).toBe(-1);
    await sleep(3000);
    expect((await a.take('p', 'k')).limit).toBe(2);
    const got = await a.getPolicyLimits('p');
    expect(got).toMatchObject({ source: 'policy-wide', limits: [{ capacity: 2 }] });
    expect(got.expiresInMs).toBeGreaterThan(0);
    expect(got.expiresInMs).toBeLessThanOrEqual(5000 - 3000);
    await sleep(Math.max(0, t0 + 5000 + 100 - performance.now()));
    expect(await a.getPolicyLimits('p')).toMatchObject({ source: 'policy', limits: [{ capacity: 10 }] });
    expect(await pttl(`${prefix}p*`)).toBe(-1);
    expect((await a.take('p', 'k2')).limit).toBe(10);
    // A node that has read nothing yet reads the ended change, and decides under the policy's numbers.
    expect((await node(prefix, 10, 1000).take('p', 'k3')).limit).toBe(10);
  });
});

describe('two nodes that disagree about a policy-wide change for up to policyRefreshMs (B has not read it yet)', () => {
  it('lowered through A (capacity 10 to 2): alternate takes through A and B for 2 s admit nothing more than the 10 already spent; the key moves once, B deciding under its copy', { timeout: 30_000 }, async () => {
    const prefix = newPrefix();
    const a = node(prefix, 10);
    const b = node(prefix, 10);
    // The bucket spent through both nodes (and both readings warmed: no change).
    const before = await alternate(a, b, 'victim', { count: 12 });
    expect(admitted(before)).toBe(10);
    await a.setPolicyLimits('p', { capacity: 2, refillPerSecond: SLOW });
    const hops = await alternate(a, b, 'victim', { forMs: 2000 });
    // A's first take installs the change on the key; B, whose reading (no change) is older than the
    // change, decides under the key's copy of it and leaves it there.
    expect(hops.length).toBeGreaterThan(50);
    expect(limitsOf(hops, 'A')).toEqual(new Set([2]));
    expect(limitsOf(hops, 'B')).toEqual(new Set([2]));
    // The 10 spent stay spent on both sides of every hop: nothing more.
    expect(admitted(hops), `admitted in 2 s after the change, on top of the ${admitted(before)} before it`).toBe(0);
  });

  it('reverted through A (capacity 2 back to 10) while B still applies the change: the whole test admits 10, and no more; the key moves once, B deciding under the base', { timeout: 30_000 }, async () => {
    const prefix = newPrefix();
    const a = node(prefix, 10);
    await a.setPolicyLimits('p', { capacity: 2, refillPerSecond: SLOW });
    // B starts after the change: its first decision reads it. Both decide under 2.
    const b = node(prefix, 10);
    const before = await alternate(a, b, 'victim', { count: 6 });
    expect(new Set(before.map((h) => h.d.limit))).toEqual(new Set([2]));
    expect(admitted(before)).toBe(2);
    await a.clearPolicyLimits('p');
    const hops = await alternate(a, b, 'victim', { forMs: 2000 });
    // A's first take leaves the marker of its reading (after the revert) in the copy's place; B, which
    // still holds the change, cannot put it back and decides under the policy's 10 as well.
    expect(hops.length).toBeGreaterThan(50);
    expect(limitsOf(hops, 'A')).toEqual(new Set([10]));
    expect(limitsOf(hops, 'B')).toEqual(new Set([10]));
    // 2 spent under the change, carried back to 10: 8 more, through A and B in turn, then nothing.
    expect([admitted(hops, 'A'), admitted(hops, 'B')]).toEqual([4, 4]);
    expect(admitted(before) + admitted(hops)).toBe(10);
  });

  it('raised through A (capacity 2 to 10) while B still has the old numbers: the whole test admits 10, and no more; the key moves once, B deciding under its copy', { timeout: 30_000 }, async () => {
    const prefix = newPrefix();
    const a = node(prefix, 2);
    const b = node(prefix, 2);
    const before = await alternate(a, b, 'victim', { count: 4 });
    expect(admitted(before)).toBe(2);
    await a.setPolicyLimits('p', { capacity: 10, refillPerSecond: SLOW });
    const hops = await alternate(a, b, 'victim', { forMs: 2000 });
    expect(hops.length).toBeGreaterThan(50);
    expect(limitsOf(hops, 'A')).toEqual(new Set([10]));
    expect(limitsOf(hops, 'B')).toEqual(new Set([10]));
    // The 2 spent carried to 10 once: 8 more, through A and B in turn.
    expect([admitted(hops, 'A'), admitted(hops, 'B')]).toEqual([4, 4]);
    expect(admitted(before) + admitted(hops)).toBe(10);
  });
});
