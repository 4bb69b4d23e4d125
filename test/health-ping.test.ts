// /healthz pings the store at most once a second: concurrent probes share one ping, and its answer is
// remembered for a second from when it came. Fake monotonic clock and fake timers; no sleeping.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLimiter, memoryStore, type Store } from '../src/index.js';
import { permitApp } from '../src/http/permit-app.js';
import { checked } from './support/openapi-contract.js';

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
});
afterEach(() => {
  vi.useRealTimers();
});

/** A store whose pings are counted and answered when the test says (or never). */
function pingStore() {
  const answers: (() => void)[] = [];
  const s = {
    pings: 0,
    answerAll() {
      for (const answer of answers.splice(0)) answer();
    },
    store: {
      ...memoryStore(),
      name: 'pinged',
      inProcess: false,
      ping: () => {
        s.pings++;
        return new Promise<void>((resolve) => answers.push(resolve));
      },
    } as Store,
  };
  return s;
}

function setup() {
  const clock = { now: 0 };
  const s = pingStore();
  const limiter = createLimiter({ store: s.store, policies: { p: { capacity: 1, refillPerSecond: 1 } } });
  const app = checked(permitApp({ limiter, tokens: ['t'], monotonicMs: () => clock.now }));
  const probe = async () => (await app.request('/healthz')).status;
  const advance = async (ms: number) => {
    clock.now += ms;
    await vi.advanceTimersByTimeAsync(ms);
  };
  return { clock, s, probe, advance };
}

describe('/healthz store ping', () => {
  it('ten concurrent probes make one ping and all get its answer', async () => {
    const { s, probe } = setup();
    const probes = Array.from({ length: 10 }, () => probe());
    await Promise.resolve();
    s.answerAll();
    expect(await Promise.all(probes)).toEqual(Array(10).fill(200));
    expect(s.pings).toBe(1);
  });

  it('an answer is remembered for a second from when it came, not from when the ping started', async () => {
    const { s, probe, advance } = setup();
    const first = probe();
    await advance(800); // the ping takes 800 ms
    s.answerAll();
    expect(await first).toBe(200);
    await advance(700); // 1.5 s after the ping started, 0.7 s after its answer
    const cached = probe();
    await Promise.resolve();
    expect(s.pings).toBe(1);
    s.answerAll();
    expect(await cached).toBe(200);
    await advance(300); // a second after the answer
    const next = probe();
    await Promise.resolve();
    s.answerAll();
    expect(await next).toBe(200);
    expect(s.pings).toBe(2);
  });

  it('a store that never answers gets at most one ping a second, with probes every 100 ms for 5 s', async () => {
    const { s, probe, advance } = setup();
    const statuses: Promise<number>[] = [];
    for (let t = 0; t < 5000; t += 100) {
      statuses.push(probe());
      await advance(100);
    }
    await advance(1000);
    expect((await Promise.all(statuses)).every((status) => status === 503)).toBe(true);
    // A ping times out after 1 s and is remembered 1 s from then: pings start at 0, 2 s and 4 s.
    expect(s.pings).toBe(3);
  });
});
