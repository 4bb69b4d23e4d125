// How fast could a memory-store decision be in RESULTS.md's loop? `node --import tsx bench/memory-floor.ts [keys]`.
// Runs, interleaved within each round and through the same `measure()` loop as `npm run bench`:
// - ours (`createLimiter` on `memoryStore`) and rate-limiter-flexible's `RateLimiterMemory`;
// - "bare GCRA": not a limiter, the least a decision with our contract can do: no validation, one Map
//   lookup by the caller's key in the policy's own map (as the memory store's index finds a bucket),
//   one clock read, the GCRA step inline, one Decision object and its promise;
// - the loop alone (an already-resolved promise).
// The bare row bounds what any rewrite of the memory path could reach against RateLimiterMemory here.
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { createLimiter, memoryStore } from '../src/index.js';
import { measure, spread } from './lib.js';

const keys = Number(process.argv[2] ?? 1);
const n = 300_000;
const rounds = 7;
const HUGE = { capacity: 1_000_000_000, refillPerSecond: 1_000_000 };
// At 1e6/s a token is one unit and a µs refills one (core/gcra.ts): the bucket holds 1e9 units.
const capacityUnits = HUGE.capacity;

const ours = createLimiter({ store: memoryStore(), policies: { bench: HUGE } });
const rlf = new RateLimiterMemory({ points: HUGE.capacity, duration: 60 });
/** The buckets of policies by name, each a Map by the caller's key. */
const policies = new Map([['bench', new Map<string, { debtUnits: number; atUs: number }>()]]);
const perf = performance;
function bare(key: string) {
  const buckets = policies.get('bench')!;
  const k = key;
  const now = Math.floor(perf.now() * 1000);
  const b = buckets.get(k);
  const debt = b ? Math.max(0, b.debtUnits - (now - b.atUs)) : 0;
  const after = debt + 1;
  if (b) {
    b.debtUnits = after;
    b.atUs = now;
  } else buckets.set(k, { debtUnits: after, atUs: now });
  return Promise.resolve({
    allowed: true,
    limit: HUGE.capacity,
    remaining: capacityUnits - after,
    retryAfterMs: 0,
    resetAfterMs: Math.ceil(after / 1000),
    waitMs: 0,
  });
}

const impls: Record<string, (i: number) => Promise<unknown>> = {
  'edge-limiter memoryStore': (i) => ours.take('bench', `k${i % keys}`),
  'rate-limiter-flexible RateLimiterMemory': (i) => rlf.consume(`k${i % keys}`),
  'bare GCRA (not a limiter: the floor of our contract)': (i) => bare(`k${i % keys}`),
  'the loop alone': () => Promise.resolve(),
};
for (const op of Object.values(impls)) await measure(n, 1, op); // warm up
const perSec: Record<string, number[]> = {};
for (let r = 0; r < rounds; r++) for (const [name, op] of Object.entries(impls)) (perSec[name] ??= []).push((await measure(n, 1, op)).opsPerSec);
const rlfRuns = perSec['rate-limiter-flexible RateLimiterMemory']!;
const loopNs = 1e9 / spread(perSec['the loop alone']!).median;
console.log(`${keys} key(s), ${n} decisions per run, median of ${rounds} interleaved rounds`);
for (const [name, xs] of Object.entries(perSec)) {
  const ns = 1e9 / spread(xs).median;
  const ratio = spread(xs.map((x, i) => x / rlfRuns[i]!)).median;
  console.log(`${name}: ${spread(xs).median.toFixed(0)}/s, ${ns.toFixed(0)} ns per iteration (${(ns - loopNs).toFixed(0)} beyond the loop), ÷ RateLimiterMemory ${ratio.toFixed(2)}`);
}
