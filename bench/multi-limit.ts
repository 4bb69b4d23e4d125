// Section 12 of `npm run bench`: what several limits, and idempotency keys, cost.
// - Redis time per decision of a policy with 1, 2 and 3 limits (one script call each, one key);
// - throughput of a 2-limit decision against what a rate-limiter-flexible user writes today: two
//   RateLimiterRedis limiters consumed one after the other (two round trips, and no rollback);
// - a take carrying an idempotency key against a plain take, in Redis time.
// Interleaved rounds; every ratio is taken per round, shown as median (min–max).
// Run on its own (`node --import tsx bench/multi-limit.ts [--quick]`) it starts a redis-server and writes
// bench/RESULTS.multi-limit.md; `npm run bench` runs it as section 12 of bench/RESULTS.md.
import { fileURLToPath } from 'node:url';
import type { Redis as IORedis } from 'ioredis';
import { runAlone, type SectionOptions } from './alone.js';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { scriptStats } from '../test/support/redis-stats.js';
import { GCRA_SCRIPT } from '../src/stores/redis-script.js';
import { fmt, fmtSpread, measure, spread, type Throughput } from './lib.js';

const HUGE = { capacity: 1_000_000_000, refillPerSecond: 1_000_000 };

interface Impl {
  name: string;
  run: () => Promise<Throughput>;
}

/** Runs each implementation once per round, interleaved; per round its throughput and Redis µs per decision. */
async function rounds(io: IORedis, impls: Impl[], decisions: number, runs: number): Promise<{ ops: number[]; us: number[] }[]> {
  const out = impls.map(() => ({ ops: [] as number[], us: [] as number[] }));
  for (const impl of impls) await impl.run(); // warm up: compile, load the scripts
  for (let r = 0; r < runs; r++) {
    for (let i = 0; i < impls.length; i++) {
      await io.config('RESETSTAT');
      out[i]!.ops.push((await impls[i]!.run()).opsPerSec);
      // Every Redis command an implementation sends counts: scripts, and rate-limiter-flexible's too.
      out[i]!.us.push((await scriptStats(io)).usec / decisions);
    }
  }
  return out;
}

const ratio = (a: number[], b: number[]) => spread(a.map((x, i) => x / b[i]!));

export async function multiLimitSection(options: SectionOptions): Promise<string[]> {
  const { io, quick, runs, log } = options;
  const n = quick ? 1500 : 15_000;
  const c = 16;
  const md: string[] = ['## 12. Several limits, and idempotency keys', ''];
  md.push(
    `One ioredis connection, concurrency ${c}, ${fmt(n)} decisions per run over 1,000 keys, all allowed (huge limits), ${runs} interleaved runs after a warm-up; median (min–max). "Redis µs" is the server's own time per decision (INFO commandstats usec of the scripts a decision runs, and of rate-limiter-flexible's commands).`,
    '',
  );
  const limiter = createLimiter({
    store: redisStore({ client: io }),
    policies: {
      one: HUGE,
      two: { limits: { a: HUGE, b: HUGE } },
      three: { limits: { a: HUGE, b: HUGE, c: HUGE } },
    },
    prefix: 'b12:',
    circuitBreaker: false,
  });

  log('multi-limit: 1, 2, 3 limits');
  const byLimits = await rounds(
    io,
    (['one', 'two', 'three'] as const).map((p) => ({ name: p, run: () => measure(n, c, (i) => limiter.take(p, `k${i % 1000}`)) })),
    n,
    runs,
  );
  md.push('| policy | decisions/s | Redis µs per decision | Redis time ÷ 1 limit |', '| --- | ---: | ---: | ---: |');
  ['1 limit', '2 limits', '3 limits'].forEach((label, i) => {
    md.push(`| ${label} | ${fmtSpread(spread(byLimits[i]!.ops))} | ${fmtSpread(spread(byLimits[i]!.us), 1)} | ${i === 0 ? '—' : fmtSpread(ratio(byLimits[i]!.us, byLimits[0]!.us), 2)} |`);
  });
  md.push('', 'Target: a 2-limit decision costs at most 1.3× a 1-limit one in Redis time.', '');

  log('multi-limit: 2 limits vs two rate-limiter-flexible limiters');
  const burst = new RateLimiterRedis({ storeClient: io, points: 1_000_000_000, duration: 1, keyPrefix: 'b12f1' });
  const daily = new RateLimiterRedis({ storeClient: io, points: 1_000_000_000, duration: 86_400, keyPrefix: 'b12f2' });
  const vsPeer = await rounds(
    io,
    [
      { name: 'ours', run: () => measure(n, c, (i) => limiter.take('two', `k${i % 1000}`)) },
      {
        name: 'rlf',
        run: () =>
          measure(n, c, async (i) => {
            await burst.consume(`k${i % 1000}`);
            await daily.consume(`k${i % 1000}`);
          }),
      },
    ],
    n,
    runs,
  );
  md.push('| 2 limits per decision | decisions/s | Redis µs per decision | ours ÷ this |', '| --- | ---: | ---: | ---: |');
  md.push(`| edge-limiter, one policy of 2 limits (one atomic step) | ${fmtSpread(spread(vsPeer[0]!.ops))} | ${fmtSpread(spread(vsPeer[0]!.us), 1)} | — |`);
  md.push(
    `| rate-limiter-flexible, two \`RateLimiterRedis\` consumed one after the other (no rollback when the second refuses) | ${fmtSpread(spread(vsPeer[1]!.ops))} | ${fmtSpread(spread(vsPeer[1]!.us), 1)} | ${fmtSpread(ratio(vsPeer[0]!.ops, vsPeer[1]!.ops), 2)} |`,
  );
  md.push('', `Target: at least 1.5× rate-limiter-flexible's throughput at concurrency ${c}.`, '');

  log('multi-limit: idempotency keys');
  let id = 0;
  const alone = createLimiter({ store: redisStore({ client: io, batch: false }), policies: { one: HUGE }, prefix: 'b12a:', circuitBreaker: false });
  // The floor of any record kept in a key of its own: the take's script as a plain take runs it, plus one
  // SET PX of a new key (no reading, no formatting), sent by hand with the limiter's arguments for this
  // policy. KEYS[2] is the new key only: the script is told of no operation id, so it takes as the
  // "script" row does (an id would send it down another path, and with these arguments make it a peek).
  const withSet = (set: string) => {
    const from = 'local key, op = KEYS[1], KEYS[2]';
    if (!GCRA_SCRIPT.includes(from)) throw new Error('bench/multi-limit.ts: the take script no longer reads its keys as this floor expects');
    return GCRA_SCRIPT.replace(from, `local key, op = KEYS[1], nil\n${set}`);
  };
  const floorSha = (await io.script('LOAD', withSet("redis.call('SET', KEYS[2], '1', 'PX', '300000')"))) as string;
  // Below any record: one SET of a new key with no expiry at all (which a record cannot do without).
  const bareSha = (await io.script('LOAD', withSet("redis.call('SET', KEYS[2], '1')"))) as string;
  const plainSha = (await io.script('LOAD', GCRA_SCRIPT)) as string;
  const takeArgv = ['', 't', '', '0,1,1000000000', '', '1', '1000000000', '1'];
  const idem = await rounds(
    io,
    [
      { name: 'plain', run: () => measure(n, c, (i) => limiter.take('one', `k${i % 1000}`)) },
      { name: 'plain alone', run: () => measure(n, c, (i) => alone.take('one', `k${i % 1000}`)) },
      { name: 'keyed', run: () => measure(n, c, (i) => limiter.take('one', `k${i % 1000}`, { idempotencyKey: `op-${id++}` })) },
      { name: 'script', run: () => measure(n, c, (i) => io.evalsha(plainSha, 1, `b12s:k${i % 1000}`, ...takeArgv)) },
      { name: 'floor', run: () => measure(n, c, (i) => io.evalsha(floorSha, 2, `b12s:k${i % 1000}`, `b12s:op:${id++}`, ...takeArgv)) },
      { name: 'bare', run: () => measure(n, c, (i) => io.evalsha(bareSha, 2, `b12s:k${i % 1000}`, `b12s:bare:${id++}`, ...takeArgv)) },
    ],
    n,
    runs,
  );
  md.push('| take | decisions/s | Redis µs per decision | Redis time ÷ plain | ÷ plain alone |', '| --- | ---: | ---: | ---: | ---: |');
  const row = (label: string, i: number, base: number) =>
    md.push(`| ${label} | ${fmtSpread(spread(idem[i]!.ops))} | ${fmtSpread(spread(idem[i]!.us), 1)} | ${i === 0 ? '—' : fmtSpread(ratio(idem[i]!.us, idem[0]!.us), 2)} | ${i === base ? '—' : fmtSpread(ratio(idem[i]!.us, idem[base]!.us), 2)} |`);
  row('plain (batched with its neighbours)', 0, 1);
  row('plain alone (`batch: false`: one script call each, as a keyed take runs)', 1, 1);
  row('with an idempotency key (a new one each)', 2, 1);
  row('floor, by hand: the take script alone', 3, 3);
  row('floor, by hand: the take script plus one `SET PX` of a new key (÷ the script alone)', 4, 3);
  row('below any record, by hand: the take script plus one `SET` of a new key with no expiry (÷ the script alone)', 5, 3);
  md.push(
    '',
    "Target: a keyed take costs at most 1.2× a plain one in Redis time. A keyed take always runs alone (its record is read and written in the take's own script call); the last three rows measure what any record in a key of its own costs at least, in the same run: one more key created with an expiry, and (lower than any record can go) one without.",
    '',
  );
  return md;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await runAlone({ title: '# Several limits and idempotency keys: benchmark', script: 'bench:multi-limit', section: 12, results: 'RESULTS.multi-limit.md', run: multiLimitSection });
}
