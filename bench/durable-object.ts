// Section 11 of `npm run bench`: how keys map to Durable Objects, measured inside workerd (Miniflare).
// Each decision is an HTTP request from this process to a test Worker that calls durableObjectStore,
// so the figures include that hop; they compare the two mappings on this machine, not production.
import { startDurableObjects } from '../scripts/lib/workerd-durable-object.js';
import { fmt, fmtSpread, measure, spread, type Throughput } from './lib.js';

export async function durableObjectSection(options: { quick: boolean; runs: number; log: (...a: unknown[]) => void }): Promise<string[]> {
  const { quick, runs, log } = options;
  const n = quick ? 500 : 3000;
  const concurrency = 16;
  const workerd = await startDurableObjects();
  const args = { limits: [{ costUnits: 1, limitUnits: 1e9, refillUnitsPerUs: 1 }] };
  const mappings = [
    { name: 'one object per key (default)', store: workerd.store() },
    { name: '16 hashed shards', store: workerd.store({ shards: 16 }) },
  ];
  let round = 0;
  const rows: string[] = [];
  for (const pattern of ['hot key', 'new key each decision', '10 keys hammered together'] as const) {
    for (const m of mappings) {
      log(`durable object: ${pattern}, ${m.name}`);
      const results: Throughput[] = [];
      for (let r = 0; r < runs; r++) {
        const id = `${round++}-${Date.now()}`;
        const key = (i: number) => (pattern === 'hot key' ? `hot-${id}` : pattern === 'new key each decision' ? `new-${id}-${i}` : `ten-${id}-${i % 10}`);
        results.push(await measure(n, concurrency, (i) => m.store.step(key(i), args)));
      }
      const ops = spread(results.map((t) => t.opsPerSec));
      rows.push(`| ${pattern} | ${m.name} | ${fmtSpread(ops)} | ${fmtSpread(spread(results.map((t) => t.p50Ms)), 2)} | ${fmtSpread(spread(results.map((t) => t.p99Ms)), 2)} |`);
    }
  }
  await workerd.dispose();
  return [
    '## 11. Durable Object store: keys to objects',
    '',
    `Inside workerd (Miniflare, one process on this machine): ${fmt(n)} decisions at concurrency ${concurrency}, ${runs} runs, each decision an HTTP request to a test Worker that calls \`durableObjectStore\` (test/fixtures/durable-object/worker.ts). "New key each decision" creates an object per decision in the per-key mapping; with shards, the 16 objects already exist after the first few.`,
    '',
    '| pattern | mapping | decisions/s | p50 ms | p99 ms |',
    '| --- | --- | ---: | ---: | ---: |',
    ...rows,
    '',
  ];
}
