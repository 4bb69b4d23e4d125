// Memory-bound child process (run with --expose-gc): 1,000,000 distinct keys through the memory store
// with the default maxKeys; prints the store size and heap growth as one JSON line. The growth counts
// ArrayBuffers too: the store keeps its buckets' numbers in a Float64Array, outside the JS heap.
import { createLimiter, memoryStore } from '../../src/index.js';

const gc = (globalThis as { gc?: () => void }).gc!;
gc();
const used = () => {
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
};
const before = used();
const store = memoryStore();
const limiter = createLimiter({ store, policies: { p: { capacity: 10, refillPerSecond: 1 } } });
let maxSize = 0;
for (let i = 0; i < 1_000_000; i++) {
  await limiter.take('p', `user-${i}`);
  if (store.size > maxSize) maxSize = store.size;
}
gc();
const heapGrowthMB = (used() - before) / 2 ** 20;
console.log(JSON.stringify({ keys: 1_000_000, maxSize, size: store.size, evictedActive: store.evictedActive, heapGrowthMB }));
