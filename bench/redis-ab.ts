// This tree's limiter against another tree's on Redis over TCP, in client CPU per decision: both
// imported side by side in one process, against one redis-server over one ioredis connection.
//
//   git worktree add --detach /tmp/headwt HEAD && ln -s "$PWD/node_modules" /tmp/headwt/
//   node --import tsx bench/redis-ab.ts [--ours <tree>] [--base <tree>] [--rounds 15]
//
// A round runs, at concurrency 1 and then 16 (the other way round every other round), both limiters
// in alternating chunks of a few hundred milliseconds (ours, base, base, ours, ...), and sums each
// one's CPU and time: the ratio (ours ÷ base) is taken per round, since this VM's speed drifts by tens
// of percent between minutes and other work runs on it. 1,000 keys, every decision allowed (capacity
// 1e9, refill 1e6/s). Give the same commit twice (two worktrees) for an A/A: the noise to read the
// A/B against.
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { startRedis } from '../scripts/lib/redis-server.js';
import { fmt, fmtSpread, spread } from './lib.js';

const { values } = parseArgs({
  options: {
    ours: { type: 'string', default: fileURLToPath(new URL('..', import.meta.url)) },
    base: { type: 'string', default: '/tmp/headwt' },
    rounds: { type: 'string', default: '15' },
    port: { type: 'string' },
  },
});
const rounds = Number(values.rounds);
const KEYS = 1000;
/** Decisions per chunk, and chunks per limiter per round. */
const CHUNK = { 1: 2_000, 16: 6_000 } as const;
const CHUNKS = 10;
const CONCURRENCY = [1, 16] as const;

interface Take {
  take(policy: 'p', key: string): Promise<{ allowed: boolean }>;
}

async function load(tree: string, io: Redis): Promise<Take> {
  const src = (file: string) => pathToFileURL(`${tree.replace(/\/$/, '')}/src/${file}`).href;
  const { createLimiter } = (await import(src('limiter.ts'))) as typeof import('../src/limiter.js');
  const { redisStore } = (await import(src('stores/redis.ts'))) as typeof import('../src/stores/redis.js');
  return createLimiter({ store: redisStore({ client: io }), policies: { p: { capacity: 1e9, refillPerSecond: 1e6 } } });
}

const keys = Array.from({ length: KEYS }, (_, i) => `k${i}`);

/** `n` decisions from `c` loops at once: client CPU µs per decision and decisions per second. */
async function run(limiter: Take, c: number, n: number): Promise<{ cpuUs: number; ms: number }> {
  let next = 0;
  let refused = 0;
  const worker = async () => {
    for (let i = next++; i < n; i = next++) if (!(await limiter.take('p', keys[i % KEYS]!)).allowed) refused++;
  };
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c }, worker));
  const wallMs = performance.now() - t0;
  const used = process.cpuUsage(cpu);
  if (refused) throw new Error(`${refused} decisions refused: the benchmark needs every one allowed`);
  return { cpuUs: used.user + used.system, ms: wallMs };
}

const redis = values.port ? undefined : await startRedis();
const io = new Redis(Number(values.port ?? redis!.port));
try {
  const trees = { ours: values.ours, base: values.base } as const;
  const limiters = { ours: await load(trees.ours, io), base: await load(trees.base, io) };
  console.log(`ours: ${trees.ours}\nbase: ${trees.base}\n${rounds} rounds; per round, limiter and concurrency ${CHUNKS} chunks of ${CHUNK[1]} decisions at 1, ${CHUNK[16]} at 16`);
  // Warm-up: both, both concurrencies, until the JIT has settled.
  for (const name of ['ours', 'base'] as const) for (const c of CONCURRENCY) await run(limiters[name], c, CHUNK[c] * 5);

  type Sample = { cpuUs: number; perSecond: number };
  /** Both limiters at concurrency `c`, in alternating chunks: CPU µs per decision and decisions/s of each. */
  async function interleaved(c: 1 | 16, first: 'ours' | 'base'): Promise<Record<'ours' | 'base', Sample>> {
    const sum = { ours: { cpuUs: 0, ms: 0 }, base: { cpuUs: 0, ms: 0 } };
    const second: 'ours' | 'base' = first === 'ours' ? 'base' : 'ours';
    for (let i = 0; i < CHUNKS; i++) {
      for (const name of i % 2 ? ([second, first] as const) : ([first, second] as const)) {
        const r = await run(limiters[name], c, CHUNK[c]);
        sum[name].cpuUs += r.cpuUs;
        sum[name].ms += r.ms;
      }
    }
    const n = CHUNKS * CHUNK[c];
    const of = (x: { cpuUs: number; ms: number }): Sample => ({ cpuUs: x.cpuUs / n, perSecond: (n / x.ms) * 1000 });
    return { ours: of(sum.ours), base: of(sum.base) };
  }

  const rows = new Map<number, { ours: Sample[]; base: Sample[] }>();
  for (const c of CONCURRENCY) rows.set(c, { ours: [], base: [] });
  for (let r = 0; r < rounds; r++) {
    const first: 'ours' | 'base' = r % 2 ? 'base' : 'ours';
    for (const c of r % 4 < 2 ? CONCURRENCY : [...CONCURRENCY].reverse()) {
      const both = await interleaved(c, first);
      rows.get(c)!.ours.push(both.ours);
      rows.get(c)!.base.push(both.base);
    }
    const line = CONCURRENCY.map((c) => {
      const row = rows.get(c)!;
      return `c=${c} cpu ${(row.ours[r]!.cpuUs / row.base[r]!.cpuUs).toFixed(3)} rate ${(row.ours[r]!.perSecond / row.base[r]!.perSecond).toFixed(3)}`;
    });
    console.log(`round ${r + 1} (${first} first): ${line.join('; ')}`);
  }
  console.log('\nper decision, median (min–max) over rounds; ratios are ours ÷ base per round');
  for (const c of CONCURRENCY) {
    const { ours, base } = rows.get(c)!;
    const cpuRatio = spread(ours.map((o, i) => o.cpuUs / base[i]!.cpuUs));
    const rateRatio = spread(ours.map((o, i) => o.perSecond / base[i]!.perSecond));
    console.log(
      `concurrency ${c}: client CPU ours ${fmtSpread(spread(ours.map((o) => o.cpuUs)), 2)} µs, base ${fmtSpread(spread(base.map((o) => o.cpuUs)), 2)} µs, ratio ${fmtSpread(cpuRatio, 3)}; ` +
        `decisions/s ours ${fmt(spread(ours.map((o) => o.perSecond)).median)}, base ${fmt(spread(base.map((o) => o.perSecond)).median)}, ratio ${fmtSpread(rateRatio, 3)}`,
    );
  }
} finally {
  io.disconnect();
  await redis?.stop();
}
