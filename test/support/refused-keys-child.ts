// Refused-keys child process (run with --expose-gc): a million distinct keys, each refused once,
// through a real limiter whose onDecision feeds createDecisionStats, on two policies; plus three keys
// refused far more often. TOP_KEYS sets K (default 100). Prints one JSON line: the summary's entries per
// policy, the heap it grew by, the three heavy keys it ranks first, and, for scale, the heap the same
// million keys take when merely held in a Map.
import { createLimiter, memoryStore } from '../../src/index.js';
import { createDecisionStats } from '../../src/limiter/decision-stats.js';

const gc = (globalThis as { gc?: () => void }).gc!;
const KEYS = Number(process.env.KEYS ?? 1_000_000);
const topKeys = Number(process.env.TOP_KEYS ?? 100);
const HEAVY = ['attacker-1', 'attacker-2', 'attacker-3'];

// The store is bounded on its own (maxKeys): what grows here, if anything, is the summary.
const store = memoryStore({ maxKeys: 1000 });
const stats = createDecisionStats({ topKeys });
const limiter = createLimiter({
  store,
  policies: { a: { capacity: 1, refillPerSecond: 0.001 }, b: { capacity: 1, refillPerSecond: 0.001 } },
  onDecision: stats.onDecision,
});

gc();
const before = process.memoryUsage().heapUsed;
let refusedDistinct = 0;
for (let i = 0; i < KEYS; i++) {
  const policy = i % 2 === 0 ? 'a' : 'b';
  const key = `one-off-${i}`;
  await limiter.take(policy, key); // allowed: a fresh bucket holds one token
  const d = await limiter.take(policy, key);
  if (!d.allowed) refusedDistinct++;
  // Every 25th iteration one of the heavy keys is refused again, on both policies (~8 % of refusals).
  if (i % 25 === 0) {
    const heavy = HEAVY[(i / 25) % 3]!;
    await limiter.take('a', heavy);
    await limiter.take('b', heavy);
  }
}
gc();
const heapGrowthMB = (process.memoryUsage().heapUsed - before) / 2 ** 20;
const snap = stats.snapshot();

// For scale: the same million keys held as an unbounded summary would hold them (a count and the
// first and last time seen per key).
gc();
const beforeMap = process.memoryUsage().heapUsed;
const naive = new Map<string, { count: number; firstSeen: number; lastSeen: number }>();
for (let i = 0; i < KEYS; i++) naive.set(`one-off-${i}`, { count: 1, firstSeen: i, lastSeen: i });
gc();
const mapMB = (process.memoryUsage().heapUsed - beforeMap) / 2 ** 20;

console.log(
  JSON.stringify({
    keys: KEYS,
    refusedDistinct,
    topKeys,
    entries: Object.fromEntries(Object.entries(snap.policies).map(([p, s]) => [p, s.topRefused.length])),
    refused: Object.fromEntries(Object.entries(snap.policies).map(([p, s]) => [p, s.refused])),
    top3: Object.fromEntries(Object.entries(snap.policies).map(([p, s]) => [p, s.topRefused.slice(0, 3).map((e) => e.key).sort()])),
    heapGrowthMB,
    mapMB,
    naiveSize: naive.size,
  }),
);
