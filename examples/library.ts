// The library on its own, on the embedded memory store.
import { createLimiter, memoryStore } from 'edge-limiter';

const limiter = createLimiter({
  store: memoryStore({ maxKeys: 100_000 }),
  policies: { api: { capacity: 10, refillPerSecond: 1 / 30, onStoreError: 'deny' } },
  prefix: 'el:', // keys are {prefix}{policy}:{key}
  timeoutMs: 1000, // bound on each store call
  onDecision: (e) => console.log(JSON.stringify(e)), // optional structured log, off by default
});

const decision = await limiter.take('api', 'user-1', { cost: 1, maxWaitMs: 0 });
if (decision.reason !== 'store_error') console.log(`${decision.remaining} tokens left`);

const controller = new AbortController(); // e.g. the incoming request's signal
await limiter.acquire('api', 'user-1', { timeoutMs: 5000, signal: controller.signal });
await limiter.peek('api', 'user-1'); // allowed: would a take of 1 pass now?
await limiter.reset('api', 'user-1');
