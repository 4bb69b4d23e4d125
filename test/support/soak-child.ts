// Soak child process (run with --expose-gc): mixed limiter traffic for SOAK_SECONDS against a store
// that is sometimes slow (past the timeout), sometimes failing and mostly fine; samples heap after a
// full GC and the active handle count every second; prints one JSON line.
import { createLimiter, memoryStore, type Store } from '../../src/index.js';

const seconds = Number(process.env.SOAK_SECONDS ?? 60);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

const inner = memoryStore({ maxKeys: 5000 });
let n = 0;
const store: Store = {
  name: 'flaky',
  async step(key, args) {
    const r = n++ % 50;
    if (r === 0) throw new Error('ECONNRESET');
    // Slower than the 20 ms timeout, but it does settle: the limiter must not keep anything for it.
    if (r === 1) await new Promise((res) => setTimeout(res, 40));
    return inner.step(key, args);
  },
  reset: (k) => inner.reset(k),
  ping: () => inner.ping(),
};
const limiter = createLimiter({
  store,
  timeoutMs: 20,
  denyCache: true,
  circuitBreaker: { failureThreshold: 50, cooldownMs: 50 },
  policies: { a: { capacity: 20, refillPerSecond: 200 }, b: { capacity: 5, refillPerSecond: 50, onStoreError: 'allow' } },
});

const deadline = performance.now() + seconds * 1000;
let decisions = 0;
async function worker(i: number) {
  let k = 0;
  while (performance.now() < deadline) {
    const key = `u${i}-${k++ % 3000}`;
    const op = k % 10;
    if (op < 6) await limiter.take('a', key);
    else if (op < 8) await limiter.take('b', key, { maxWaitMs: 30 });
    else if (op < 9) await limiter.peek('a', key);
    else await limiter.acquire('b', key, { timeoutMs: 15 }).catch(() => {});
    decisions++;
  }
}

const samples: { t: number; heapMB: number; handles: number }[] = [];
const sampler = setInterval(() => {
  gc();
  samples.push({ t: samples.length, heapMB: process.memoryUsage().heapUsed / 2 ** 20, handles: process.getActiveResourcesInfo().length });
}, 1000);
await Promise.all(Array.from({ length: 32 }, (_, i) => worker(i)));
clearInterval(sampler);
await new Promise((r) => setTimeout(r, 100));
gc();
const after = { heapMB: process.memoryUsage().heapUsed / 2 ** 20, handles: process.getActiveResourcesInfo().length, pending: limiter.stats().pendingStoreCalls };
console.log(JSON.stringify({ seconds, decisions, samples, after }));
