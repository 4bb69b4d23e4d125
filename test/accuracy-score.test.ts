// The benchmark's window scoring (bench/accuracy.ts) on made-up admissions: it finds an excess or a
// starved window where there is one, and blames no latency on the limiter.
import { describe, expect, it } from 'vitest';
import { windowOver, windowUnder } from '../bench/accuracy.js';

const policy = { capacity: 5, refillPerSecond: 100 }; // a token every 10 ms

/** An exact bucket under constant demand: 5 at once at t = 0, then one every 10 ms; each request took 2 ms. */
function exactRun(untilMs: number) {
  const at: number[] = [2, 2, 2, 2, 2];
  for (let t = 10; t <= untilMs; t += 10) at.push(t + 2);
  return { at, from: at.map((t) => t - 2) };
}

describe('window scoring', () => {
  it('an exact run scores 0 over and 0 under in every window', () => {
    const { at, from } = exactRun(2000);
    expect(windowOver(from, at, policy)).toBe(0);
    expect(windowUnder(at, { fromMs: 2, toMs: 2000, maxLatencyMs: 2 }, policy)).toBe(0);
  });

  it('one extra admission anywhere is one over, although a total over the whole run would hide it', () => {
    const { at, from } = exactRun(2000);
    // The run admits one more at 1000 ms; drop one at its very end so the total is unchanged.
    at.push(1003);
    from.push(1001);
    at.splice(at.length - 2, 1);
    from.splice(from.length - 2, 1);
    expect(windowOver(from, at, policy)).toBe(1);
    // With a spend lag (leases), the same extra is within the stated bound.
    expect(windowOver(from, at, policy, { spendLagMs: 10 })).toBe(0);
  });

  it('latency is never blamed: a slow request widens its own window', () => {
    const { at, from } = exactRun(1000);
    // The same admissions, each sent 50 ms before its answer: still exact.
    expect(windowOver(at.map((t) => t - 50), at, policy)).toBe(0);
    // But claiming zero latency for a burst of 6 at one instant is an excess.
    expect(windowOver([...from, 2], [...at, 2], policy)).toBe(1);
  });

  it('a starved stretch in the middle is found, beyond the latency and one-token allowance', () => {
    const { at } = exactRun(2000);
    const starved = at.filter((t) => t < 1000 || t > 1300); // 30 tokens never given
    expect(windowUnder(starved, { fromMs: 2, toMs: 2000, maxLatencyMs: 2 }, policy)).toBeGreaterThanOrEqual(27);
    expect(windowUnder(starved, { fromMs: 2, toMs: 2000, maxLatencyMs: 2 }, policy, { heldTokens: 40 })).toBe(0);
  });
});
