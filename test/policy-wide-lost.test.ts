// A reading of the policy-wide change that never settles. On a Worker, a request's I/O and timers are
// cancelled when it ends unless handed to ctx.waitUntil: a reading started in the background by a
// request answered from its lease (no store call to wait for) was lost that way, and every later
// decision of the policy on that isolate waited for it forever (the load test's leased run through the
// Durable Object hung about one run in six). Now the background reading goes to the request's
// waitUntil, no decision waits for a reading past the policy's timeoutMs + READ_GRACE_MS, and a
// reading in flight longer than that is replaced.
import { describe, expect, it } from 'vitest';
import { resolvePolicy } from '../src/core/policy.js';
import { newEntry } from '../src/limiter/entry.js';
import { createPolicyWide, READ_GRACE_MS } from '../src/limiter/policy-wide.js';
import type { Store } from '../src/store.js';

const TIMEOUT_MS = 100;

function setup() {
  const clock = { ms: 0 };
  const state = { lost: false, reads: 0 };
  const handed: Promise<unknown>[] = [];
  const entry = newEntry(resolvePolicy('api', { capacity: 5, refillPerSecond: 1 }, { failMode: 'open', timeoutMs: TIMEOUT_MS } as never), 'p:');
  const wide = createPolicyWide({
    store: { name: 'remote' } as Store,
    refreshMs: 1000,
    monotonicMs: () => clock.ms,
    read: () => {
      state.reads++;
      return state.lost ? new Promise(() => {}) : Promise.resolve({ atUs: clock.ms * 1000 });
    },
    onChange: () => {},
  });
  return { clock, state, handed, entry, wide, waitUntil: (p: Promise<unknown>) => void handed.push(p) };
}

describe('a lost reading of the policy-wide change', () => {
  it('is handed to the request\'s waitUntil, waited for at most timeoutMs + grace, and replaced', async () => {
    const { clock, state, handed, entry, wide, waitUntil } = setup();
    await wide.refresh(entry, 0, waitUntil);
    expect(state.reads).toBe(1);
    expect(handed).toHaveLength(1);
    expect(entry.wide.readAtMs).toBe(0);

    // Past half of refreshMs: a reading starts in the background, handed to waitUntil, and is lost.
    state.lost = true;
    clock.ms = 600;
    expect(wide.refresh(entry, 600, waitUntil)).toBeUndefined();
    expect(state.reads).toBe(2);
    expect(handed).toHaveLength(2);
    // Within the timeout it is the reading in flight: no second one.
    clock.ms = 600 + TIMEOUT_MS;
    expect(wide.refresh(entry, clock.ms, waitUntil)).toBeUndefined();
    expect(state.reads).toBe(2);

    // refreshMs old: the decision must wait for a reading; the lost one is not it, and the one that
    // replaces it is lost too, so the wait ends by the timeout + grace, with the reading held.
    clock.ms = 1100;
    const started = performance.now();
    const wait = wide.refresh(entry, clock.ms, waitUntil);
    expect(wait).toBeInstanceOf(Promise);
    expect(state.reads).toBe(3);
    await wait;
    const waitedMs = performance.now() - started;
    expect(waitedMs).toBeGreaterThanOrEqual(TIMEOUT_MS + READ_GRACE_MS - 5);
    expect(waitedMs).toBeLessThan(TIMEOUT_MS + READ_GRACE_MS + 1000);
    expect(entry.wide.readAtMs).toBe(0);

    // The store answers again: the next decision past the grace reads, and decides with it.
    state.lost = false;
    clock.ms = 1100 + TIMEOUT_MS + READ_GRACE_MS + 1;
    await wide.refresh(entry, clock.ms, waitUntil);
    expect(state.reads).toBe(4);
    expect(entry.wide.readAtMs).toBe(clock.ms);
    expect(wide.fresh(entry)).toBe(true);
  });
});
