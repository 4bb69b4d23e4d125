// The limiter's parts: store calls that never settle, the breaker and the deny cache on fake clocks (no
// sleeps), outage events, and decisions that claim no numbers the store did not give.
import { describe, expect, it } from 'vitest';
import { createLimiter, memoryStore, type Decision, type Store, type StoreStatusEvent } from '../src/index.js';
import { createBreaker } from '../src/limiter/breaker.js';
import { permitApp } from '../src/http/permit-app.js';
import { checked } from './support/openapi-contract.js';

/** A store whose calls hang forever (they never settle, even when aborted) until `answering` is set. */
function blackHoleStore() {
  const inner = memoryStore();
  const s = {
    name: 'blackhole',
    answering: false,
    calls: 0,
    aborted: 0,
    step(key: string, args: Parameters<Store['step']>[1], options?: Parameters<Store['step']>[2]) {
      s.calls++;
      options?.signal?.addEventListener('abort', () => s.aborted++, { once: true });
      if (s.answering) return inner.step(key, args);
      return new Promise<never>(() => {});
    },
    reset: (key: string) => inner.reset(key),
    ping: async () => {},
  };
  return s;
}

describe('store calls that never settle', () => {
  it('2,000 timed-out decisions do not block the next one: the slot is freed at the timeout and the call aborted', async () => {
    const store = blackHoleStore();
    const limiter = createLimiter({ store, timeoutMs: 5, circuitBreaker: false, policies: { p: { capacity: 10, refillPerSecond: 1 } } });
    let timedOut = 0;
    for (let round = 0; round < 20; round++) {
      const batch = await Promise.all(Array.from({ length: 100 }, (_, i) => limiter.take('p', `k${i}`)));
      timedOut += batch.filter((d) => d.reason === 'store_error').length;
      expect(limiter.stats().pendingStoreCalls).toBe(0);
    }
    expect(timedOut).toBe(2000);
    expect(store.calls).toBe(2000);
    // Every hung call was told to stop through the signal passed to Store.step.
    expect(store.aborted).toBe(2000);
    store.answering = true;
    const next = await limiter.take('p', 'k0');
    expect(next).toMatchObject({ allowed: true, remaining: 9 });
    expect(next.reason).toBeUndefined();
    expect(limiter.stats()).toEqual({ pendingStoreCalls: 0, maxPendingStoreCalls: 1024, circuit: 'closed', leases: { keys: 0, tokens: 0 }, localKeys: 0 });
  });

  it('counts calls in flight up to maxPendingStoreCalls, fails fast beyond it, and /healthz says not ok meanwhile', async () => {
    const store = blackHoleStore();
    const limiter = createLimiter({ store, timeoutMs: 300, circuitBreaker: false, maxPendingStoreCalls: 4, policies: { p: { capacity: 10, refillPerSecond: 1 } } });
    const app = checked(permitApp({ limiter, tokens: ['t'] }));
    const inFlight = Array.from({ length: 4 }, () => limiter.take('p', 'k'));
    expect(limiter.stats().pendingStoreCalls).toBe(4);
    const t0 = performance.now();
    const refused = await limiter.take('p', 'k');
    // Refused without waiting for the 300 ms timeout (the margin allows for a loaded machine).
    expect(performance.now() - t0).toBeLessThan(250);
    expect(refused).toMatchObject({ allowed: false, reason: 'store_error' });
    expect(store.calls).toBe(4);
    const busy = await app.request('/healthz');
    expect(busy.status).toBe(503);
    expect(await busy.json()).toEqual({ ok: false, store: 'blackhole', pendingStoreCalls: 4, maxPendingStoreCalls: 4, circuit: 'closed', leases: { keys: 0, tokens: 0 }, localKeys: 0 });
    await Promise.all(inFlight);
    const idle = await app.request('/healthz');
    expect(idle.status).toBe(200);
    expect(await idle.json()).toMatchObject({ ok: true, pendingStoreCalls: 0 });
  });
});

describe('one store call, settled once', () => {
  const policies = { p: { capacity: 10, refillPerSecond: 1 } };

  it('a store that throws synchronously gives a store_error decision, not a rejection', async () => {
    const store: Store = {
      name: 'sync-throw',
      step: () => {
        throw new Error('not connected');
      },
      reset: async () => {},
      ping: async () => {},
    };
    const limiter = createLimiter({ store, circuitBreaker: false, policies });
    expect(await limiter.take('p', 'k')).toMatchObject({ allowed: false, reason: 'store_error' });
    expect(limiter.stats().pendingStoreCalls).toBe(0);
  });

  it('an answer or a failure arriving after the timeout is ignored (no second settlement, no unhandled rejection)', async () => {
    const late: Array<(ok: boolean) => void> = [];
    const store: Store = {
      name: 'late',
      step: () =>
        new Promise((resolve, reject) => {
          late.push((ok) => (ok ? resolve({ allowed: true, debtUnits: [0] }) : reject(new Error('late failure'))));
        }),
      reset: async () => {},
      ping: async () => {},
    };
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const limiter = createLimiter({ store, timeoutMs: 5, circuitBreaker: false, policies });
      const [a, b] = await Promise.all([limiter.take('p', 'a'), limiter.take('p', 'b')]);
      expect(a).toMatchObject({ allowed: false, reason: 'store_error' });
      expect(b).toMatchObject({ allowed: false, reason: 'store_error' });
      late[0]!(true);
      late[1]!(false);
      await new Promise((r) => setTimeout(r, 20));
      expect(unhandled).toEqual([]);
      expect(limiter.stats().pendingStoreCalls).toBe(0);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('makes an abort signal only for a store that reads it', async () => {
    const Real = globalThis.AbortController;
    let made = 0;
    globalThis.AbortController = class extends Real {
      constructor() {
        super();
        made++;
      }
    };
    try {
      const inner = memoryStore();
      const quiet: Store = { name: 'quiet', step: (k, a) => inner.step(k, a), reset: async () => {}, ping: async () => {} };
      const reading: Store = {
        name: 'reading',
        step: (k, a, o) => {
          expect(o?.signal?.aborted).toBe(false);
          return inner.step(k, a);
        },
        reset: async () => {},
        ping: async () => {},
      };
      for (let i = 0; i < 5; i++) await createLimiter({ store: quiet, policies }).take('p', `q${i}`);
      expect(made).toBe(0);
      for (let i = 0; i < 5; i++) await createLimiter({ store: reading, policies }).take('p', `r${i}`);
      expect(made).toBe(5);
      // A store that reads the signal only after the limiter stopped waiting still finds it aborted.
      let readLate: AbortSignal | undefined;
      const slow: Store = {
        name: 'slow',
        step: (_k, _a, o) => new Promise((resolve) => setTimeout(() => ((readLate = o?.signal), resolve({ allowed: true, debtUnits: [0] })), 30)),
        reset: async () => {},
        ping: async () => {},
      };
      expect(await createLimiter({ store: slow, timeoutMs: 5, circuitBreaker: false, policies }).take('p', 'k')).toMatchObject({ reason: 'store_error' });
      await new Promise((r) => setTimeout(r, 50));
      expect(readLate?.aborted).toBe(true);
      expect(String((readLate?.reason as Error).message)).toMatch(/timed out after 5 ms/);
    } finally {
      globalThis.AbortController = Real;
    }
  });
});

describe('circuit breaker on a fake clock', () => {
  it('opens after the threshold, refuses during the cool-down, lets exactly one probe through, closes on success', () => {
    let now = 0;
    const b = createBreaker({ failureThreshold: 2, cooldownMs: 100 }, () => now);
    expect(b.enter()).toBe('call');
    b.failed('call');
    expect(b.state()).toBe('closed');
    b.failed('call');
    expect(b.state()).toBe('open');
    expect(b.enter()).toBe('refused');
    now = 99;
    expect(b.enter()).toBe('refused');
    now = 100;
    expect(b.state()).toBe('half-open');
    expect(b.enter()).toBe('probe');
    expect(b.enter()).toBe('refused');
    // An older call failing meanwhile re-arms the cool-down but does not end the probe.
    b.failed('call');
    now = 250;
    expect(b.enter()).toBe('refused');
    b.failed('probe');
    expect(b.state()).toBe('open');
    now = 350;
    expect(b.enter()).toBe('probe');
    b.succeeded('probe');
    expect(b.state()).toBe('closed');
    expect(b.enter()).toBe('call');
  });

  it('a probe that could not run gives its turn back; `false` never opens; bad options name the field', () => {
    let now = 0;
    const b = createBreaker({ failureThreshold: 1, cooldownMs: 10 }, () => now);
    b.failed('call');
    now = 10;
    const probe = b.enter();
    expect(probe).toBe('probe');
    b.release(probe);
    expect(b.enter()).toBe('probe');
    const never = createBreaker(false, () => now);
    for (let i = 0; i < 100; i++) never.failed('call');
    expect(never.enter()).toBe('call');
    expect(() => createBreaker({ failureThreshold: 0 }, () => 0)).toThrow(/circuitBreaker\.failureThreshold/);
    expect(() => createBreaker({ cooldownMs: -1 }, () => 0)).toThrow(/circuitBreaker\.cooldownMs/);
  });
});

describe('deny cache on a fake clock', () => {
  /** One fake clock for the store (epoch ms) and the limiter (monotonic ms). */
  function setup(policy: { capacity: number; refillPerSecond: number }) {
    const clock = { t: 0 };
    const store = memoryStore({ nowMs: () => 1_800_000_000_000 + clock.t });
    const steps = { n: 0 };
    const counted: Store = { name: 'memory', step: (k, a) => (steps.n++, store.step(k, a)), reset: (k) => store.reset(k), ping: async () => {} };
    const limiter = createLimiter({ store: counted, denyCache: true, monotonicMs: () => clock.t, policies: { p: policy } });
    return { clock, limiter, steps, store };
  }

  it('recomputes remaining, resetAfterMs and retryAfterMs of a cached refusal from the time elapsed', async () => {
    const { clock, limiter, steps } = setup({ capacity: 5, refillPerSecond: 10 });
    expect((await limiter.take('p', 'k', { cost: 5 })).allowed).toBe(true);
    const first = await limiter.take('p', 'k', { cost: 3 });
    expect(first).toMatchObject({ allowed: false, remaining: 0, resetAfterMs: 500, retryAfterMs: 300 });
    expect(steps.n).toBe(2);
    clock.t = 150;
    const cached = await limiter.take('p', 'k', { cost: 3 });
    expect(steps.n).toBe(2);
    // 150 ms later one token (100 ms each) is back: the answer says so instead of repeating the first refusal.
    expect(cached).toEqual({ allowed: false, limit: 5, remaining: 1, resetAfterMs: 350, retryAfterMs: 150, waitMs: 0, reason: 'deny_cache' });
    // A larger request is refused from the cache with its own wait.
    expect(await limiter.take('p', 'k', { cost: 4 })).toMatchObject({ reason: 'deny_cache', retryAfterMs: 250 });
    // A smaller one goes to the store, which admits it.
    expect(await limiter.take('p', 'k', { cost: 1 })).toMatchObject({ allowed: true, remaining: 0 });
    expect(steps.n).toBe(3);
  });

  it('documented trade-off: a reset through another node is not seen until the cached refusal expires', async () => {
    const { clock, limiter, store } = setup({ capacity: 1, refillPerSecond: 1 });
    const other = createLimiter({ store, policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    await limiter.take('p', 'k');
    expect((await limiter.take('p', 'k')).allowed).toBe(false);
    await other.reset('p', 'k');
    expect(await other.peek('p', 'k')).toMatchObject({ allowed: true, remaining: 1 });
    clock.t = 999;
    expect(await limiter.take('p', 'k')).toMatchObject({ allowed: false, reason: 'deny_cache', retryAfterMs: 1 });
    clock.t = 1000;
    expect(await limiter.take('p', 'k')).toMatchObject({ allowed: true });
    // A reset through this limiter clears its own entry at once.
    await limiter.take('p', 'k2');
    expect((await limiter.take('p', 'k2')).allowed).toBe(false);
    await limiter.reset('p', 'k2');
    expect((await limiter.take('p', 'k2')).allowed).toBe(true);
  });
});

describe('outages: one event when decisions start failing, one when the store decides again', () => {
  it('reports down once per outage and up once after it, with the time down on the monotonic clock', async () => {
    let now = 0;
    let failing = true;
    const inner = memoryStore();
    const store: Store = {
      name: 'flaky',
      step: async (k, a) => {
        if (failing) throw new Error('ECONNREFUSED');
        return inner.step(k, a);
      },
      reset: async () => {},
      ping: async () => {},
    };
    const events: StoreStatusEvent[] = [];
    const limiter = createLimiter({
      store,
      monotonicMs: () => now,
      circuitBreaker: { failureThreshold: 3, cooldownMs: 50 },
      onStoreStatus: (e) => {
        events.push(e);
        throw new Error('a broken logger changes nothing');
      },
      policies: { p: { capacity: 100, refillPerSecond: 1 } },
    });
    for (let i = 0; i < 50; i++, now += 10) expect((await limiter.take('p', 'k')).reason).toBe('store_error');
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ status: 'down', store: 'flaky' });
    expect(String((events[0] as { error: Error }).error.message)).toMatch(/ECONNREFUSED/);
    failing = false;
    now += 100;
    const back = await limiter.take('p', 'k');
    expect(back.reason).toBeUndefined();
    for (let i = 0; i < 10; i++) await limiter.take('p', 'k');
    expect(events).toHaveLength(2);
    expect(events[1]).toEqual({ status: 'up', store: 'flaky', downMs: 600 });
    failing = true;
    await limiter.take('p', 'k');
    expect(events.map((e) => e.status)).toEqual(['down', 'up', 'down']);
  });
});

describe('the pending cap is this node refusing, not the store', () => {
  it('a decision refused by maxPendingStoreCalls fails per onStoreError but reports no outage (no down, no up)', async () => {
    const inner = memoryStore();
    const held: (() => void)[] = [];
    let holding = true;
    const store: Store = {
      name: 'held',
      step: (k, a) => (holding ? new Promise((resolve) => held.push(() => resolve(inner.stepSync(k, a)))) : inner.step(k, a)),
      reset: async () => {},
      ping: async () => {},
    };
    const events: StoreStatusEvent[] = [];
    const limiter = createLimiter({ store, maxPendingStoreCalls: 2, onStoreStatus: (e) => events.push(e), policies: { p: { capacity: 10, refillPerSecond: 1 } } });
    const inFlight = [limiter.take('p', 'a'), limiter.take('p', 'b')];
    expect(await limiter.take('p', 'c')).toMatchObject({ allowed: false, reason: 'store_error' });
    expect(held).toHaveLength(2);
    holding = false;
    for (const release of held) release();
    expect((await Promise.all(inFlight)).every((d) => d.allowed)).toBe(true);
    expect(await limiter.take('p', 'c')).toMatchObject({ allowed: true });
    expect(events).toEqual([]);
  });
});

describe('a store_error decision claims no bucket numbers', () => {
  it('has no remaining or resetAfterMs, for both fail modes', async () => {
    const store: Store = { name: 'down', step: async () => Promise.reject(new Error('down')), reset: async () => {}, ping: async () => {} };
    const limiter = createLimiter({
      store,
      circuitBreaker: false,
      policies: { closed: { capacity: 5, refillPerSecond: 1 }, open: { capacity: 5, refillPerSecond: 1, onStoreError: 'allow' } },
    });
    for (const [name, allowed] of [
      ['closed', false],
      ['open', true],
    ] as const) {
      const d: Decision = await limiter.take(name, 'k');
      expect(d).toEqual({ allowed, limit: 5, retryAfterMs: allowed ? 0 : 1000, waitMs: 0, reason: 'store_error' });
      expect('remaining' in d).toBe(false);
    }
  });
});

describe("take()'s hot path (one token, no wait, no hook or cache)", () => {
  // Two limiters on the same fake clock, one with an onDecision hook (which sends every take the long
  // way, through decideAsync) and one without: every input, valid or not, must get the same answer or
  // the same error from both.
  it('answers every input as the long way does, errors included', async () => {
    const policies = { one: { capacity: 3, refillPerSecond: 2 }, two: { limits: { s: { capacity: 2, refillPerSecond: 1 }, d: { capacity: 5, refillPerSecond: 0.01 } } } };
    let nowMs = 1_000;
    // Over the memory store, and over a store with no stepSync (as a remote one: through the store
    // caller) that fails every step on one key.
    const make = (hooked: boolean, remote: boolean) => {
      const inner = memoryStore({ nowMs: () => nowMs });
      const step: Store['step'] = (k, a) => (k.endsWith(':k2') ? Promise.reject(new Error('down')) : inner.step(k, a));
      const store: Store = remote ? { name: 'remote', step, reset: (k) => inner.reset(k), ping: async () => {} } : inner;
      return createLimiter({ store, policies, ...(hooked ? { onDecision: () => {} } : {}) });
    };
    for (const remote of [false, true]) await sameAnswers(make(false, remote), make(true, remote), () => (nowMs += 700));
  });

  it('a copy of the memory store with its own stepSync is answered by that stepSync', async () => {
    const policies = { one: { capacity: 3, refillPerSecond: 1 } };
    const inner = memoryStore({ nowMs: () => 0 });
    const failing: Store = { ...inner, stepSync: () => { throw new Error('down'); } };
    expect(await createLimiter({ store: failing, policies }).take('one', 'k')).toMatchObject({ allowed: false, reason: 'store_error' });
    // A wrapper that keeps every tenant's buckets apart: the hot path must charge the key it writes.
    const tenant: Store = { ...inner, stepSync: (k, a) => inner.stepSync(`t1/${k}`, a) };
    const limiter = createLimiter({ store: tenant, policies });
    for (let i = 0; i < 3; i++) await limiter.take('one', 'k');
    expect(await limiter.take('one', 'k')).toMatchObject({ allowed: false });
    expect(inner.stepSync('t1/el:one:k', { limits: [{ costUnits: 0, limitUnits: 0, refillUnitsPerUs: 1 }] }).debtUnits[0]).toBeGreaterThan(0);
    expect(inner.size).toBe(1);
  });

  it('reads store methods on every decision, and each option once', async () => {
    const policies = { one: { capacity: 3, refillPerSecond: 1 } };
    const store: Store = { ...memoryStore({ nowMs: () => 0 }) };
    const limiter = createLimiter({ store, policies });
    expect(await limiter.take('one', 'k')).toMatchObject({ allowed: true, remaining: 2 });
    // Removed after the limiter was made: the store's step answers.
    const methods = store as unknown as Record<string, unknown>;
    methods.stepSync = undefined;
    methods.takeOneSync = null;
    expect(await limiter.take('one', 'k')).toMatchObject({ allowed: true, remaining: 1 });
    let reads = 0;
    const opts = {
      get cost() {
        return ++reads === 1 ? 2 : 1;
      },
    };
    expect(await limiter.take('one', 'k2', opts)).toMatchObject({ allowed: true, remaining: 1 });
    expect(reads).toBe(1);
  });

  it('a takeOneSync that answers no number is a store failure, per the fail mode; NaN hands the take to stepSync', async () => {
    const inner = memoryStore({ nowMs: () => 0 });
    // NaN: the key has an override record (Store.takeOneSync), and stepSync decides.
    const deferring = createLimiter({ store: { ...inner, takeOneSync: () => Number.NaN }, policies: { one: { capacity: 3, refillPerSecond: 1 } } });
    expect(await deferring.take('one', 'n')).toEqual({ allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, resetAfterMs: 1000, waitMs: 0 });
    for (const answer of [Infinity, -Infinity, '3', undefined]) {
      const store: Store = { ...inner, takeOneSync: () => answer as number };
      // Each limiter's first decision on the policy reads its policy-wide record, the long way; the
      // next one is the hot path's.
      const deny = createLimiter({ store, policies: { one: { capacity: 3, refillPerSecond: 1 } } });
      await deny.take('one', 'first');
      expect(await deny.take('one', 'k')).toEqual({ allowed: false, limit: 3, retryAfterMs: 1000, waitMs: 0, reason: 'store_error' });
      const allow = createLimiter({ store, policies: { one: { capacity: 3, refillPerSecond: 1, onStoreError: 'allow' } } });
      await allow.take('one', 'first');
      expect(await allow.take('one', 'k')).toMatchObject({ allowed: true, reason: 'store_error' });
    }
  });

  async function sameAnswers(fast: ReturnType<typeof createLimiter>, slow: ReturnType<typeof createLimiter>, later: () => void) {
    const keys: unknown[] = ['k', 'k2', 'x'.repeat(170), 'y'.repeat(171), 'é'.repeat(200), 'é'.repeat(300), '', '\uD800', 'a\uDC00b', 7, null, undefined];
    const names: unknown[] = ['one', 'two', 'nope', 1, undefined];
    const options: unknown[] = [undefined, {}, { cost: 1 }, { maxWaitMs: 0 }, { cost: 2 }, { maxWaitMs: 500 }, { cost: 0 }, { maxWaitMs: null }, { maxWaitMs: -1 }, { cost: 1, maxWaitMs: Number.NaN }, { idempotencyKey: 'op-1' }, { cost: '1' }];
    const answer = async (p: Promise<Decision>) => p.then((d) => ({ d }), (e: Error) => ({ e: `${e.name}: ${e.message}` }));
    let compared = 0;
    for (let i = 0; i < 3; i++) {
      for (const name of names) {
        for (const key of keys) {
          for (const opts of options) {
            const take = (l: typeof fast) => answer(l.take(name as 'one', key as string, opts as undefined));
            const [a, b] = [await take(fast), await take(slow)];
            expect(a, `${String(name)} ${String(key).slice(0, 12)} ${JSON.stringify(opts)}`).toEqual(b);
            compared++;
          }
        }
      }
      later();
    }
    expect(compared).toBe(3 * names.length * keys.length * options.length);
  }
});
