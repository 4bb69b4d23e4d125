// The refused-keys summary: bounded whatever the traffic, and right about the keys that matter.
import { describe, expect, it } from 'vitest';
import { createHeavyHitters } from '../src/limiter/heavy-hitters.js';

describe('heavy hitters (space-saving)', () => {
  it('counts exactly while the keys fit, with first and last seen', () => {
    const hh = createHeavyHitters(10);
    for (let t = 0; t < 30; t++) hh.add(t % 3 === 0 ? 'a' : 'b', t);
    expect(hh.top()).toEqual([
      { key: 'b', count: 20, error: 0, firstSeenMs: 1, lastSeenMs: 29 },
      { key: 'a', count: 10, error: 0, firstSeenMs: 0, lastSeenMs: 27 },
    ]);
    expect(hh.total).toBe(30);
  });

  it('a million distinct keys keep K entries and little memory, and the heavy keys stay in, their counts bracketed', () => {
    const K = 100;
    const hh = createHeavyHitters(K);
    const heavy = ['attacker-1', 'attacker-2', 'attacker-3'];
    const trueCount = new Map(heavy.map((k) => [k, 0]));
    globalThis.gc?.();
    const before = process.memoryUsage().heapUsed;
    let seed = 12345;
    const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    for (let i = 0; i < 1_000_000; i++) {
      // 6 % of sightings are one of the three heavy keys; the rest are a million distinct keys.
      if (rand() < 0.06) {
        const k = heavy[i % 3]!;
        trueCount.set(k, trueCount.get(k)! + 1);
        hh.add(k, i);
      } else hh.add(`one-off-${i}`, i);
    }
    expect(hh.size).toBe(K);
    const grown = process.memoryUsage().heapUsed - before;
    // K entries are a few KB; a million kept keys would be tens of MB. Generous for GC timing.
    expect(grown).toBeLessThan(8 * 1024 * 1024);
    const top = hh.top(3);
    expect(top.map((e) => e.key).sort()).toEqual([...heavy].sort());
    for (const e of top) {
      const truth = trueCount.get(e.key)!;
      expect(e.count).toBeGreaterThanOrEqual(truth);
      expect(e.count - e.error).toBeLessThanOrEqual(truth);
      // Space-saving's bound: the overcount is at most total / K.
      expect(e.count - truth).toBeLessThanOrEqual(hh.total / K);
    }
  });

  it('a new key replaces the least counted entry, never a heavier one, and inherits its count as error', () => {
    const hh = createHeavyHitters(2);
    hh.add('a', 0);
    hh.add('b', 1);
    for (let t = 2; t < 12; t++) hh.add('a', t);
    hh.add('c', 12);
    expect(hh.top()).toEqual([
      { key: 'a', count: 11, error: 0, firstSeenMs: 0, lastSeenMs: 11 },
      { key: 'c', count: 2, error: 1, firstSeenMs: 12, lastSeenMs: 12 },
    ]);
  });

  it('refuses a capacity that is not a positive integer', () => {
    expect(() => createHeavyHitters(0)).toThrow(/capacity/);
    expect(() => createHeavyHitters(1.5)).toThrow(/capacity/);
  });
});
