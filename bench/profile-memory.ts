// Profiles the memory-store decision path: `node --cpu-prof --import tsx bench/profile-memory.ts`.
// Used to find what makes ours slower than rate-limiter-flexible's RateLimiterMemory (see RESULTS.md).
import { createLimiter, memoryStore } from '../src/index.js';
import { measure } from './lib.js';

const limiter = createLimiter({ store: memoryStore(), policies: { bench: { capacity: 1_000_000_000, refillPerSecond: 1_000_000 } } });
const n = Number(process.argv[2] ?? 2_000_000);
const keys = Number(process.argv[3] ?? 1);
const r = await measure(n, 1, (i) => limiter.take('bench', `k${i % keys}`));
console.log(JSON.stringify(r));
