// `npm run bench` (or `npm run bench -- --quick`): every comparison in one run, on this machine, against
// one real redis-server. Writes bench/RESULTS.md (bench/RESULTS.quick.md in quick mode) and
// bench/admitted.svg. Peers: @upstash/ratelimit, rate-limiter-flexible, hono-rate-limiter.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { Redis as IORedis } from 'ioredis';
import { Redis as UpstashRedis } from '@upstash/redis';
import { Ratelimit } from '@upstash/ratelimit';
import { RateLimiterMemory, RateLimiterRedis } from 'rate-limiter-flexible';
import { createLimiter, memoryStore } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { GCRA_BATCH_SCRIPT, GCRA_BATCH_SCRIPT_SHA, GCRA_SCRIPT, GCRA_SCRIPT_SHA } from '../src/stores/redis-script.js';
import { startUpstashLocal } from '../scripts/upstash-local/server.js';
import { startRedis, freePort } from '../scripts/lib/redis-server.js';
import { commandStats, scriptStats } from '../test/support/redis-stats.js';
import { accuracyRun, score, type Accuracy } from './accuracy.js';
import { edgeLatencySection } from './edge-latency.js';
import { durableObjectSection } from './durable-object.js';
import { multiLimitSection } from './multi-limit.js';
import { overridesSection } from './overrides.js';
import { autocannon, rawLoad, serverCpuUs, startHttpServer } from './http-load.js';
import { fmt, fmtSpread, measure, percentile, sleep, spread, upstashOverIoredis, type Spread, type Throughput } from './lib.js';

const quick = process.argv.includes('--quick') || process.env.npm_config_quick === 'true';
const root = fileURLToPath(new URL('..', import.meta.url));
const run = promisify(execFile);
const started = Date.now();

const P = quick
  ? { runs: 3, shortRuns: 3, tcpN: 1500, restN: 300, memN: 20_000, memKeys: 100_000, httpSec: 1, httpCpuN: 5000, accuracyMs: 1000, waitCallers: 10, waitRate: 10 }
  : { runs: 5, shortRuns: 9, tcpN: 15_000, restN: 3000, memN: 300_000, memKeys: 100_000, httpSec: 5, httpCpuN: 40_000, accuracyMs: 5000, waitCallers: 50, waitRate: 10 };

const log = (...a: unknown[]) => console.log('[bench]', ...a);
const md: string[] = [];

// ---------------------------------------------------------------------------------------------------
log(`mode: ${quick ? 'quick' : 'full'}`);
const redis = await startRedis();
const io = new IORedis(redis.url);
await io.script('LOAD', GCRA_SCRIPT).then((sha) => {
  if (sha !== GCRA_SCRIPT_SHA) throw new Error(`script SHA mismatch: ${sha}`);
});
const redisVersion = ((await io.info('server')).match(/redis_version:(\S+)/) ?? [])[1];

const upstashOverTcp = upstashOverIoredis(io);

const HUGE = { capacity: 1_000_000_000, refillPerSecond: 1_000_000 };
let uniq = 0;

type Row = { name: string; figures: { ops: Spread; p50: Spread; p99: Spread }; ratio?: Spread; redisUs?: Spread };

async function repeat(fn: () => Promise<Throughput>): Promise<Throughput[]> {
  const out: Throughput[] = [];
  for (let r = 0; r < P.runs; r++) out.push(await fn());
  return out;
}
const fig = (ts: Throughput[]) => ({ ops: spread(ts.map((t) => t.opsPerSec)), p50: spread(ts.map((t) => t.p50Ms)), p99: spread(ts.map((t) => t.p99Ms)) });

function table(rows: Row[], ratioLabel: string): string[] {
  const withUs = rows.some((r) => r.redisUs);
  const out = [
    `| implementation | decisions/s | p50 ms | p99 ms | ${ratioLabel} |${withUs ? ' Redis CPU µs/decision |' : ''}`,
    `| --- | ---: | ---: | ---: | ---: |${withUs ? ' ---: |' : ''}`,
  ];
  for (const r of rows) {
    out.push(
      `| ${r.name} | ${fmtSpread(r.figures.ops)} | ${fmtSpread(r.figures.p50, 3)} | ${fmtSpread(r.figures.p99, 3)} | ${r.ratio ? fmtSpread(r.ratio, 2) : '—'} |${withUs ? ` ${r.redisUs ? fmtSpread(r.redisUs, 1) : '—'} |` : ''}`,
    );
  }
  return out;
}

/**
 * Runs each implementation once per round, interleaved, so drift hits all alike; ratios are per round.
 * With `decisions`, also records Redis-side CPU per decision (the server's own profile of the work).
 */
async function compare(impls: { name: string; run: () => Promise<Throughput> }[], baseline = 0, decisions?: number, runs = P.runs): Promise<Row[]> {
  const results: Throughput[][] = impls.map(() => []);
  const us: number[][] = impls.map(() => []);
  for (let r = 0; r < runs; r++) {
    // Rotated each round: no row always runs right after the same one (and inherits its cache state).
    for (let j = 0; j < impls.length; j++) {
      const i = (j + r) % impls.length;
      if (decisions) await io.config('RESETSTAT');
      results[i]!.push(await impls[i]!.run());
      if (decisions) us[i]!.push((await scriptStats(io)).usec / decisions);
    }
  }
  return impls.map((impl, i) => ({
    name: impl.name,
    figures: fig(results[i]!),
    ratio: i === baseline ? undefined : spread(results[baseline]!.map((b, r) => b.opsPerSec / results[i]![r]!.opsPerSec)),
    redisUs: decisions ? spread(us[i]!) : undefined,
  }));
}

// 1. Redis over TCP -------------------------------------------------------------------------------
md.push('## 1. Redis over TCP, one process', '');
md.push(
  'Every implementation uses the same ioredis connection to the same redis-server; all decisions are allowed (huge limits), keys spread over 1,000 buckets. The ratio column is ours ÷ that row, per round (above 1: ours is faster). The floor is not a limiter: the script calls our store makes for these decisions, sent straight from the loop with none of the limiter\'s code and no reply decoded, so the least our contract costs on this connection. A decision sent alone is one EVALSHA of the single-key script; at concurrency above 1, decisions queued together go as one EVALSHA of the batch script, grouped by the store\'s rule (a decision goes at once while no call is in flight; the others wait for the event loop\'s next turn, at most 64 a call, or go early once half of the previous turn\'s count is queued while fewer than two calls are in flight). The ceiling is `redis-benchmark` running our single-key script by SHA over as many connections as our concurrency (at high concurrency, one pipelining ioredis connection beats many connections, so it can be below ours). "Redis CPU" is the server\'s own script time per decision (INFO commandstats usec of EVALSHA/EVAL, which includes the commands the script runs): at high concurrency Redis\'s single thread is the bottleneck, so this is the profile that decides the ranking there. `bench/redis-cost.ts` breaks it down further.',
  '',
);
const ours = createLimiter({ store: redisStore({ client: io }), policies: { bench: HUGE }, prefix: 'b1:', circuitBreaker: false });
const upstashTcp = new Ratelimit({ redis: upstashOverTcp as never, limiter: Ratelimit.tokenBucket(1000, '1 ms', 1_000_000_000), analytics: false, ephemeralCache: false, prefix: 'b1u' });
const rlf = new RateLimiterRedis({ storeClient: io, points: 1_000_000_000, duration: 1, keyPrefix: 'b1f' });

/**
 * The script's ARGV for a take of 1 on the HUGE policy, as the limiter sends it (see GCRA_SCRIPT): the
 * server's clock (""), the kind "t", no extra, the base (no wait, a token of 1 unit, 1e9 units) and no
 * policy-wide change, then costUnits, limitUnits and refillUnitsPerUs (a token is 1 unit at 1e6/s).
 */
const CEILING_TAKE_ARGV = ['', 't', '', '0,1,1000000000', '', '1', '1000000000', '1'];
/** The batch script's part for one such take (see GCRA_BATCH_SCRIPT): its number of limits and entry 1 (1 + 16), then the limit's three. */
const BATCH_TAKE_ARGV = ['17', '1', '1000000000', '1'];
/** The batch's entry 1, after the last key: the base, and no policy-wide change. */
const BATCH_ENTRY_ARGV = ['0,1,1000000000', ''];

/**
 * The floor row's sender: the script calls redisStore makes for takes of 1 on the HUGE policy (ARGV as
 * stores/redis.ts builds them), grouped by its rule for TCP clients (see `step` and `flushAll` there),
 * with none of the limiter's code around them: no policy, no key building, no reply decoded. Each
 * concurrency gets its own, as each limiter keeps its own batching state.
 */
function floorSender(): (key: string) => Promise<unknown> {
  type Waiting = { key: string; resolve(reply: unknown): void; reject(err: unknown): void };
  let waiting: Waiting[] = [];
  let scheduled = false;
  let inFlight = 0;
  let gathered = 0;
  let earlyAt = Infinity;
  const single = (key: string) => io.evalsha(GCRA_SCRIPT_SHA, 1, key, ...CEILING_TAKE_ARGV);
  const send = (batch: Waiting[]) => {
    inFlight++;
    const argv = [''];
    for (let i = 0; i < batch.length; i++) argv.push(...BATCH_TAKE_ARGV);
    argv.push(...BATCH_ENTRY_ARGV);
    const call = batch.length === 1 ? single(batch[0]!.key) : io.evalsha(GCRA_BATCH_SCRIPT_SHA, batch.length, ...batch.map((w) => w.key), ...argv);
    call.then(
      (reply) => {
        inFlight--;
        for (const w of batch) w.resolve(reply);
      },
      (err) => {
        inFlight--;
        for (const w of batch) w.reject(err);
      },
    );
  };
  const flushAll = () => {
    earlyAt = Math.max(8, gathered >> 1);
    gathered = 0;
    scheduled = false;
    const batch = waiting;
    waiting = [];
    if (batch.length > 0) send(batch);
  };
  return (key) => {
    if (inFlight === 0 && !scheduled) {
      inFlight++;
      return single(key).finally(() => inFlight--);
    }
    return new Promise((resolve, reject) => {
      waiting.push({ key, resolve, reject });
      gathered++;
      if (waiting.length >= 64 || (inFlight < 2 && waiting.length >= earlyAt)) {
        const batch = waiting;
        waiting = [];
        send(batch);
      } else if (!scheduled) {
        scheduled = true;
        setImmediate(flushAll);
      }
    });
  };
}

async function redisBenchmark(concurrency: number, n: number): Promise<Throughput> {
  const { stdout } = await run('redis-benchmark', ['-p', String(redis.port), '-c', String(concurrency), '-n', String(n), '-r', '1000', '--csv', '--precision', '3', 'EVALSHA', GCRA_SCRIPT_SHA, '1', 'b1c:bench:__rand_int__', ...CEILING_TAKE_ARGV]);
  const line = stdout.trim().split('\n').pop()!.split('","').map((s) => s.replace(/"/g, ''));
  return { opsPerSec: Number(line[1]), p50Ms: Number(line[4]), p99Ms: Number(line[6]) };
}

await io.script('LOAD', GCRA_BATCH_SCRIPT).then((sha) => {
  if (sha !== GCRA_BATCH_SCRIPT_SHA) throw new Error(`batch script SHA mismatch: ${sha}`);
});
const tcpRatios: Record<string, Spread> = {};
for (const c of [1, 16, 256]) {
  log(`tcp concurrency ${c}`);
  const n = c === 1 ? Math.round(P.tcpN / 2) : P.tcpN;
  const floor = floorSender();
  const impls = [
    { name: 'edge-limiter `redisStore`', run: () => measure(n, c, (i) => ours.take('bench', `k${i % 1000}`)) },
    { name: '@upstash/ratelimit `tokenBucket` (ioredis adapter)', run: () => measure(n, c, (i) => upstashTcp.limit(`k${i % 1000}`)) },
    { name: 'rate-limiter-flexible `RateLimiterRedis`', run: () => measure(n, c, (i) => rlf.consume(`k${i % 1000}`)) },
    // What any client of our contract pays on this connection: our store's script calls, with none of
    // the limiter's code around them.
    { name: 'floor: our store\'s script calls (single-key, or batch for decisions queued together) by EVALSHA on the same ioredis connection, no limiter code', run: () => measure(n, c, (i) => floor(`b1s:k${i % 1000}`)) },
    { name: 'ceiling: `redis-benchmark` EVALSHA of our single-key script', run: () => redisBenchmark(c, n) },
  ];
  for (const impl of impls.slice(0, 4)) await impl.run(); // warm up: compile, load the scripts
  const rows = await compare(impls, 0, n, P.shortRuns);
  for (const r of rows.slice(1)) tcpRatios[`${r.name} @${c}`] = r.ratio!;
  md.push(`**Concurrency ${c}** (${fmt(n)} decisions per run, ${P.shortRuns} runs after one warm-up run; median (min–max))`, '', ...table(rows, 'ours ÷ this'), '');
}

// 2. Through the local Upstash REST server ----------------------------------------------------------
log('upstash rest');
md.push('## 2. Through the local Upstash REST server (`@upstash/redis` client)', '');
md.push('Both use `@upstash/redis` with its defaults (base64 responses, auto-pipelining) against the local Upstash-compatible server in front of the same redis-server. Concurrency 16.', '');
const rest = await startUpstashLocal({ redisUrl: redis.url, token: 'bench' });
const restClient = new UpstashRedis({ url: rest.url, token: 'bench' });
const oursRest = createLimiter({ store: redisStore({ client: restClient }), policies: { bench: HUGE }, prefix: 'b2:', circuitBreaker: false });
const upstashRest = new Ratelimit({ redis: restClient, limiter: Ratelimit.tokenBucket(1000, '1 ms', 1_000_000_000), analytics: false, ephemeralCache: false, prefix: 'b2u' });
await oursRest.take('bench', 'warm');
await upstashRest.limit('warm');
const restRows = await compare([
  { name: 'edge-limiter `redisStore`', run: () => measure(P.restN, 16, (i) => oursRest.take('bench', `k${i % 1000}`)) },
  { name: '@upstash/ratelimit `tokenBucket`', run: () => measure(P.restN, 16, (i) => upstashRest.limit(`k${i % 1000}`)) },
]);
md.push(...table(restRows, 'ours ÷ this'), '');
await rest.close();

// 3. Memory -----------------------------------------------------------------------------------------
log('memory');
md.push('## 3. Memory store', '');
md.push(`One process, concurrency 1, all allowed. "1 key" hits one bucket; "${fmt(P.memKeys)} keys" cycles through that many (ours at its default maxKeys of 100,000).`, '');
for (const keys of [1, P.memKeys]) {
  const oursMem = createLimiter({ store: memoryStore(), policies: { bench: HUGE } });
  const rlfMem = new RateLimiterMemory({ points: 1_000_000_000, duration: 60 });
  const impls = [
    { name: 'edge-limiter `memoryStore`', run: () => measure(P.memN, 1, (i) => oursMem.take('bench', `k${i % keys}`)) },
    { name: 'rate-limiter-flexible `RateLimiterMemory`', run: () => measure(P.memN, 1, (i) => rlfMem.consume(`k${i % keys}`)) },
    // The floor: the same loop around an operation that does nothing (an already-resolved promise).
    { name: 'the measuring loop alone (no limiter)', run: () => measure(P.memN, 1, () => Promise.resolve()) },
  ];
  for (const impl of impls) await impl.run(); // warm up: compile, and fill the buckets
  const rows = await compare(impls, 0, undefined, P.shortRuns);
  md.push(`**${keys === 1 ? '1 key' : `${fmt(keys)} keys`}** (${fmt(P.memN)} decisions per run, ${P.shortRuns} runs after one warm-up run)`, '', ...table(rows, 'ours ÷ this'), '');
}

// 4. HTTP -------------------------------------------------------------------------------------------
log('http');
md.push('## 4. HTTP: a Hono app on @hono/node-server', '');
md.push(
  `\`GET /hello\` through no limiter, our middleware, and hono-rate-limiter (memory store each time; every request allowed). Two measures, in the same servers:`,
  '',
  `- **The server's own CPU per request** (read this one): each server is driven by a load generator that does not parse responses (\`bench/http-load.ts\` rawLoad, 16 keep-alive connections, ${fmt(P.httpCpuN)} requests per run) and reports its CPU time over IPC. It does not depend on what the load generator spends, which shares this machine's two cores. Rows are ranked by it; "ours ÷ this" is this row's CPU ÷ ours, per round (above 1: ours is cheaper).`,
  `- **Requests/s under autocannon** (50 connections, ${P.httpSec} s per run), with its latencies: autocannon parses every response, and its cost grows with the headers, on the same cores as the server.`,
  '',
  'The floors are not limiters: an empty async middleware, and one that only sets our five headers with fixed values (`c.header()` before `next()`), what any middleware sending them costs at least.',
  '',
);

const cannon = (port: number) => autocannon(port, P.httpSec);
const httpServers = [
  { name: 'no limiter', server: await startHttpServer('none') },
  { name: 'edge-limiter `rateLimit` (memory)', server: await startHttpServer('ours') },
  { name: 'hono-rate-limiter (memory)', server: await startHttpServer('hono-rate-limiter') },
  { name: 'floor: an empty async middleware', server: await startHttpServer('empty-middleware') },
  { name: 'floor: only our five headers, fixed values', server: await startHttpServer('headers-only') },
];
const OURS_HTTP = 1;
async function cpuPerRequest(server: { child: ChildProcess; port: number }): Promise<number> {
  const before = await serverCpuUs(server.child);
  await rawLoad(server.port, P.httpCpuN);
  return ((await serverCpuUs(server.child)) - before) / P.httpCpuN;
}
for (const { server } of httpServers) {
  await cannon(server.port).catch(() => undefined); // warm up JIT
  await rawLoad(server.port, P.httpCpuN);
}
const httpCpu: number[][] = httpServers.map(() => []);
for (let r = 0; r < P.runs; r++) for (let i = 0; i < httpServers.length; i++) httpCpu[i]!.push(await cpuPerRequest(httpServers[i]!.server));
const httpRows = await compare(
  httpServers.slice(0, 3).map(({ name, server }) => ({ name, run: () => cannon(server.port) })),
  OURS_HTTP,
);
for (const { server } of httpServers) server.child.kill();
const byCpu = httpServers.map((h, i) => ({ name: h.name, cpu: spread(httpCpu[i]!), i })).sort((a, b) => a.cpu.median - b.cpu.median);
md.push(
  '| app | server CPU µs per request | ours ÷ this, by CPU | requests/s (autocannon) | p50 ms | p99 ms | ours ÷ this, by requests/s |',
  '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
  ...byCpu.map(({ name, cpu, i }) => {
    const row = httpRows[i];
    const cpuRatio = i === OURS_HTTP ? '—' : fmtSpread(spread(httpCpu[i]!.map((x, r) => x / httpCpu[OURS_HTTP]![r]!)), 2);
    const cannonCells = row ? `${fmtSpread(row.figures.ops)} | ${fmtSpread(row.figures.p50, 1)} | ${fmtSpread(row.figures.p99, 1)} | ${row.ratio ? fmtSpread(row.ratio, 2) : '—'}` : '— | — | — | —';
    return `| ${name} | ${fmtSpread(cpu, 1)} | ${cpuRatio} | ${cannonCells} |`;
  }),
  '',
);

// 5 & 6. Accuracy under contention and under clock skew -------------------------------------------
const CONTENTION = { capacity: 20, refillPerSecond: 100 };
log('contention');
md.push('## 5. Accuracy under contention', '');
md.push(
  `Policy: capacity ${CONTENTION.capacity}, ${CONTENTION.refillPerSecond}/s. Two Node server instances (functions/node.ts) on the same redis-server; four worker processes × 200 concurrent callers, round robin over both servers, one bucket, ${P.accuracyMs / 1000} s. Ideal = capacity + rate × elapsed, bracketed by the callers' first and last decision times.`,
  '',
);
const TOKEN = 'bench-token';
async function nodeServer(): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'functions/node.ts')], {
    env: { ...process.env, PORT: String(port), REDIS_URL: redis.url, PERMIT_TOKENS: TOKEN, LIMITER_POLICIES: JSON.stringify({ contention: { ...CONTENTION, timeoutMs: 5000 } }) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (d) => String(d).includes('"msg":"listening"') && resolve());
    child.once('exit', (c) => reject(new Error(`node server exited ${c}`)));
  });
  return { url: `http://127.0.0.1:${port}`, child };
}
const nodes = [await nodeServer(), await nodeServer()];
const contentionResults: Accuracy[] = [];
const contentionRuns = quick ? 1 : 3;
for (let r = 0; r < contentionRuns; r++) {
  const key = `contention-${Date.now()}-${uniq++}`;
  const res = await accuracyRun(
    Array.from({ length: 4 }, () => ({ config: { mode: 'http' as const, callers: 200, durationMs: P.accuracyMs, policy: CONTENTION, key, targets: nodes.map((n) => n.url), token: TOKEN } })),
  );
  contentionResults.push(score(res, CONTENTION));
}
for (const n of nodes) n.child.kill('SIGTERM');
md.push(
  '| run | decisions | admitted | ideal | over-admission | under-admission | worst window over | worst window under |',
  '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
);
contentionResults.forEach((a, i) =>
  md.push(
    `| ${i + 1} | ${fmt(a.decisions)} | ${a.admitted} | ${a.idealMin.toFixed(1)}–${a.idealMax.toFixed(1)} | ${a.over} | ${a.under} (${a.underPct.toFixed(2)} %) | ${a.windowOver} | ${a.windowUnder} |`,
  ),
);
md.push(
  '',
  'Goals: over-admission 0; under-admission ≤ 1 token + 0.5 %; 0 and 0 in every window. A window is scored from the requests\' own times (`bench/accuracy.ts`): over, the most any run of admissions exceeded capacity + rate × (the time from the earliest of their requests to the last of their answers); under, the most any window on a 10 ms grid fell short of the floor(rate × (length − the slowest decision)) − 1 admissions the store must have made in it while callers kept asking.',
  '',
);

// The same contention with token leases (10 tokens a grant): each worker process is one node deciding
// in-process against Redis (a lease lives in a limiter, so the HTTP servers above would be 2 nodes).
const LEASED = { ...CONTENTION, lease: { tokens: 10, maxAgeMs: 1000 } };
// The lease bounds of docs/leases.md: a leased token is spent at most tokens × intervalMs after the store counted
// it, and at most nodes × tokens sit unused.
const LEASE_ALLOWANCE = { spendLagMs: LEASED.lease.tokens * (1000 / CONTENTION.refillPerSecond), heldTokens: 4 * LEASED.lease.tokens };
const leaseRuns: Accuracy[] = [];
for (let r = 0; r < contentionRuns; r++) {
  const key = `contention-lease-${Date.now()}-${uniq++}`;
  const res = await accuracyRun(Array.from({ length: 4 }, () => ({ config: { mode: 'ours' as const, callers: 200, durationMs: P.accuracyMs, policy: LEASED, key, redisUrl: redis.url } })));
  leaseRuns.push(score(res, CONTENTION, LEASE_ALLOWANCE));
}
md.push(
  'With token leases (`lease: { tokens: 10, maxAgeMs: 1000 }`), four worker processes (four nodes) × 200 callers deciding in-process against the same Redis:',
  '',
  '| run | decisions | admitted | ideal | over-admission | under-admission | worst window over | worst window under |',
  '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
);
leaseRuns.forEach((a, i) =>
  md.push(`| ${i + 1} | ${fmt(a.decisions)} | ${a.admitted} | ${a.idealMin.toFixed(1)}–${a.idealMax.toFixed(1)} | ${a.over} | ${a.under} | ${a.windowOver} | ${a.windowUnder} |`),
);
md.push(
  '',
  'Goals with leases: over-admission 0; under-admission ≤ nodes × tokens = 40; per window 0 and 0 against the lease bounds (windows stretched by tokens × intervalMs = 100 ms, and 40 tokens held).',
  '',
);

log('clock skew');
md.push('## 6. Accuracy under clock skew', '');
md.push(
  `The same policy and load shape, but each worker process decides directly against Redis (no HTTP hop), and two of the four run under \`faketime -f +2s\`, two under \`-2s\` (with \`FAKETIME_DONT_FAKE_MONOTONIC=1\`, so \`performance.now()\` stays usable; the table shows the wall-clock offset each process really had and a 50 ms timer as it measured it). ${P.accuracyMs / 1000} s per run.`,
  '',
);
const skewRows: { lib: string; scenario: string; a: Accuracy; skews: number[]; perf: number[] }[] = [];
for (const scenario of ['together', 'late joiners'] as const) {
  for (const lib of ['ours', 'upstash'] as const) {
    const key = `skew-${lib}-${uniq++}-${Date.now()}`;
    const res = await accuracyRun(
      [-2, -2, 2, 2].map((skewSeconds) => ({
        skewSeconds,
        config: {
          mode: lib,
          callers: 200,
          durationMs: P.accuracyMs,
          policy: CONTENTION,
          key,
          redisUrl: redis.url,
          // Late joiners: the +2 s processes start halfway through, after the -2 s ones drained the bucket.
          startDelayMs: scenario === 'late joiners' && skewSeconds > 0 ? P.accuracyMs / 2 : 0,
        },
      })),
    );
    skewRows.push({ lib, scenario, a: score(res, CONTENTION), skews: res.map((r) => r.skewSeenMs), perf: res.map((r) => r.perfCheckMs) });
  }
}
// The same with token leases on (appended after the loop above so the chart's rows keep their places).
for (const scenario of ['together', 'late joiners'] as const) {
  const key = `skew-lease-${uniq++}-${Date.now()}`;
  const res = await accuracyRun(
    [-2, -2, 2, 2].map((skewSeconds) => ({
      skewSeconds,
      config: {
        mode: 'ours' as const,
        callers: 200,
        durationMs: P.accuracyMs,
        policy: { ...CONTENTION, lease: { tokens: 10, maxAgeMs: 1000 } },
        key,
        redisUrl: redis.url,
        startDelayMs: scenario === 'late joiners' && skewSeconds > 0 ? P.accuracyMs / 2 : 0,
      },
    })),
  );
  skewRows.push({ lib: 'ours-lease', scenario, a: score(res, CONTENTION, LEASE_ALLOWANCE), skews: res.map((r) => r.skewSeenMs), perf: res.map((r) => r.perfCheckMs) });
}
md.push(
  '| scenario | limiter | wall-clock offsets seen (ms) | 50 ms timer read as (ms) | decisions | admitted | ideal | over-admission | under-admission | worst window over | worst window under |',
  '| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
);
for (const { lib, scenario, a, skews, perf } of skewRows) {
  md.push(
    `| ${scenario} | ${lib === 'ours' ? 'edge-limiter (store clock)' : lib === 'ours-lease' ? 'edge-limiter, leases N = 10 (store clock)' : '@upstash/ratelimit `tokenBucket` (caller clock)'} | ${skews.map((s) => (s > 0 ? '+' : '') + Math.round(s)).join(', ')} | ${perf.map((p) => p.toFixed(0)).join(', ')} | ${fmt(a.decisions)} | ${a.admitted} | ${a.idealMin.toFixed(1)}–${a.idealMax.toFixed(1)} | ${a.over} | ${a.under} | ${a.windowOver} | ${a.windowUnder} |`,
  );
}
md.push(
  '',
  '"Together": all four processes hammer the bucket from the start. "Late joiners": the two −2 s processes start alone and drain the bucket; the two +2 s processes join halfway through.',
  '',
);

// SVG: admitted over time against the ideal line.
function svg(series: { label: string; color: string; times: number[] }[], durationMs: number, policy: typeof CONTENTION): string {
  const W = 760;
  const H = 420;
  const pad = { l: 60, r: 20, t: 30, b: 50 };
  const maxY = Math.max(policy.capacity + (policy.refillPerSecond * durationMs) / 1000, ...series.map((s) => s.times.length)) * 1.05;
  const x = (ms: number) => pad.l + (ms / durationMs) * (W - pad.l - pad.r);
  const y = (n: number) => H - pad.b - (n / maxY) * (H - pad.t - pad.b);
  const path = (times: number[]) => {
    let d = `M${x(0).toFixed(1)},${y(0).toFixed(1)}`;
    times.forEach((t, i) => {
      d += ` L${x(Math.min(t, durationMs)).toFixed(1)},${y(i).toFixed(1)} L${x(Math.min(t, durationMs)).toFixed(1)},${y(i + 1).toFixed(1)}`;
    });
    return d;
  };
  const ticks = Array.from({ length: 6 }, (_, i) => (durationMs / 5) * i);
  const yTicks = Array.from({ length: 6 }, (_, i) => Math.round((maxY / 5) * i));
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="18" text-anchor="middle" font-size="14">Admitted over time (capacity ${policy.capacity}, ${policy.refillPerSecond}/s; clocks −2 s from 0, +2 s joining at ${(durationMs / 2000).toFixed(1)} s)</text>`,
    ...ticks.map((t) => `<line x1="${x(t)}" y1="${H - pad.b}" x2="${x(t)}" y2="${pad.t}" stroke="#eee"/><text x="${x(t)}" y="${H - pad.b + 16}" text-anchor="middle">${(t / 1000).toFixed(1)} s</text>`),
    ...yTicks.map((v) => `<line x1="${pad.l}" y1="${y(v)}" x2="${W - pad.r}" y2="${y(v)}" stroke="#eee"/><text x="${pad.l - 6}" y="${y(v) + 4}" text-anchor="end">${v}</text>`),
    `<line x1="${x(0)}" y1="${y(policy.capacity)}" x2="${x(durationMs)}" y2="${y(policy.capacity + (policy.refillPerSecond * durationMs) / 1000)}" stroke="#888" stroke-width="2" stroke-dasharray="6 4"/>`,
    ...series.map((s) => `<path d="${path(s.times)}" fill="none" stroke="${s.color}" stroke-width="1.6"/>`),
    `<g transform="translate(${pad.l + 10},${pad.t + 10})">`,
    `<line x1="0" y1="0" x2="24" y2="0" stroke="#888" stroke-width="2" stroke-dasharray="6 4"/><text x="30" y="4">ideal: capacity + rate × t</text>`,
    ...series.map((s, i) => `<line x1="0" y1="${18 * (i + 1)}" x2="24" y2="${18 * (i + 1)}" stroke="${s.color}" stroke-width="2"/><text x="30" y="${18 * (i + 1) + 4}">${s.label} (${s.times.length} admitted)</text>`),
    '</g>',
    `<text x="${W / 2}" y="${H - 10}" text-anchor="middle">time since start</text>`,
    '</svg>',
  ].join('\n');
}
writeFileSync(
  join(root, quick ? 'bench/admitted.quick.svg' : 'bench/admitted.svg'),
  svg(
    [
      { label: 'edge-limiter (store clock)', color: '#1f77b4', times: skewRows[2]!.a.admittedAt },
      { label: '@upstash/ratelimit tokenBucket (caller clock)', color: '#d62728', times: skewRows[3]!.a.admittedAt },
    ],
    P.accuracyMs,
    CONTENTION,
  ),
);
md.push(`![admitted over time](${quick ? 'admitted.quick.svg' : 'admitted.svg'})`, '');

// 7. Waiting: reserve-and-sleep vs polling ----------------------------------------------------------
log('waiting');
md.push('## 7. Waiting for a permit', '');
md.push(
  `${P.waitCallers} callers want a permit from a policy of ${P.waitRate}/s (capacity ${P.waitRate}) whose bucket starts empty, through the Redis store. \`acquire()\` reserves in one round trip and sleeps; the polling loop (as in the seed code) calls \`take()\` and sleeps 100 ms until allowed. Round trips are EVALSHA calls counted by Redis (INFO commandstats).`,
  '',
);
async function waiting(kind: 'acquire' | 'poll') {
  const limiter = createLimiter({ store: redisStore({ client: io }), policies: { w: { capacity: P.waitRate, refillPerSecond: P.waitRate } }, prefix: `b7${uniq++}:` });
  await limiter.take('w', 'k', { cost: P.waitRate });
  await io.config('RESETSTAT');
  const t0 = performance.now();
  const starts: { i: number; t: number }[] = [];
  await Promise.all(
    Array.from({ length: P.waitCallers }, async (_, i) => {
      if (kind === 'acquire') await limiter.acquire('w', 'k', { timeoutMs: 60_000 });
      else while (!(await limiter.take('w', 'k')).allowed) await sleep(100);
      starts.push({ i, t: performance.now() - t0 });
    }),
  );
  const s = await commandStats(io);
  const trips = (s.evalsha?.calls ?? 0) + (s.eval?.calls ?? 0);
  const ordered = [...starts].sort((a, b) => a.t - b.t);
  const gaps = ordered.slice(1).map((x, k) => x.t - ordered[k]!.t);
  const sortedGaps = [...gaps].sort((a, b) => a - b);
  const fifo = ordered.every((x, k) => x.i === k);
  return { trips, perPermit: trips / P.waitCallers, gapMedian: percentile(sortedGaps, 50), gapMin: sortedGaps[0]!, gapMax: sortedGaps[sortedGaps.length - 1]!, fifo, totalMs: ordered[ordered.length - 1]!.t };
}
const waitAcquire = await waiting('acquire');
const waitPoll = await waiting('poll');
md.push('| strategy | round trips | per permit | spacing of starts, median (min–max) ms | FIFO | last start |', '| --- | ---: | ---: | ---: | --- | ---: |');
for (const [name, w] of [['`acquire()` (reserve, then sleep)', waitAcquire], ['polling loop (take, sleep 100 ms)', waitPoll]] as const) {
  md.push(`| ${name} | ${w.trips} | ${w.perPermit.toFixed(2)} | ${w.gapMedian.toFixed(1)} (${w.gapMin.toFixed(1)}–${w.gapMax.toFixed(1)}) | ${w.fifo ? 'yes' : 'no'} | ${(w.totalMs / 1000).toFixed(2)} s |`);
}
md.push('', `Goal for \`acquire()\`: ${1000 / P.waitRate} ms ± 15 ms apart, FIFO, 1 round trip per permit.`, '');

// 8. Commands per decision ---------------------------------------------------------------------------
log('commands per decision');
md.push('## 8. Redis commands per decision', '');
md.push('Counted by Redis (INFO commandstats deltas) over 100 decisions each. "Top level" is what the client sent; the commands the script runs inside are listed separately.', '');
async function commandsPer(label: string, op: (i: number) => Promise<unknown>) {
  await io.config('RESETSTAT');
  for (let i = 0; i < 100; i++) await op(i);
  const s = await commandStats(io);
  const top = (s.evalsha?.calls ?? 0) + (s.eval?.calls ?? 0) + Object.entries(s).filter(([k]) => !['evalsha', 'eval', 'time', 'get', 'set', 'config|resetstat'].includes(k)).reduce((a, [, v]) => a + v.calls, 0);
  const inner = ['time', 'get', 'set'].map((c) => `${c.toUpperCase()} ${((s[c]?.calls ?? 0) / 100).toFixed(2)}`).join(', ');
  return `| ${label} | ${(top / 100).toFixed(2)} | ${inner} |`;
}
const cl = createLimiter({ store: redisStore({ client: io }), policies: { p: { capacity: 1_000_000, refillPerSecond: 1 }, r: { capacity: 1, refillPerSecond: 1000 } }, prefix: `b8${uniq++}:` });
await cl.take('p', 'steady');
md.push('| decision | top-level commands per decision | inside the script, per decision |', '| --- | ---: | --- |');
md.push(await commandsPer('steady state (existing bucket)', () => cl.take('p', 'steady')));
md.push(await commandsPer('new key each time', (i) => cl.take('p', `new-${i}`)));
md.push(await commandsPer('reserve-and-wait (maxWaitMs)', () => cl.take('r', 'queue', { maxWaitMs: 60_000 })));
md.push('');

// 9. Worker bundle size --------------------------------------------------------------------------------
log('bundles');
md.push('## 9. Worker bundle size', '');
md.push('`wrangler deploy --dry-run --outdir`, then gzip -9 of the bundle.', '');
md.push('| build | bundle | gzip |', '| --- | ---: | ---: |');
for (const [label, config, file] of [
  ['memory / Upstash (wrangler.toml, functions/worker.ts)', 'wrangler.toml', 'worker.js'],
  ['MongoDB driver (wrangler.mongodb.toml, functions/worker-mongodb.ts, nodejs_compat)', 'wrangler.mongodb.toml', 'worker-mongodb.js'],
] as const) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-bundle-'));
  await run(process.execPath, [join(root, 'node_modules/wrangler/bin/wrangler.js'), 'deploy', '--dry-run', '--outdir', dir, '--config', config], { cwd: root, env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } });
  const code = readFileSync(join(dir, file));
  md.push(`| ${label} | ${fmt(code.length / 1024, 1)} KiB | ${fmt(gzipSync(code, { level: 9 }).length / 1024, 1)} KiB |`);
}
md.push('');

// 10. Edge latency -------------------------------------------------------------------------------------
md.push(...(await edgeLatencySection({ redisPort: redis.port, admin: io, quick, log })));

// 11. Durable Object key mapping ---------------------------------------------------------------------
md.push(...(await durableObjectSection({ quick, runs: quick ? 1 : 3, log })));

// 12. Several limits, and idempotency keys ---------------------------------------------------------------
md.push(...(await multiLimitSection({ io, quick, runs: P.shortRuns, log })));

// 13. Runtime limits (override records) at Redis ------------------------------------------------------
md.push(...(await overridesSection({ io, quick, runs: P.shortRuns, log })));

// Summary and file -------------------------------------------------------------------------------------
io.disconnect();
await redis.stop();
const header = [
  '# Benchmark results',
  '',
  `Written by \`npm run bench${quick ? ' -- --quick' : ''}\` on ${new Date(started).toISOString()} in ${((Date.now() - started) / 1000).toFixed(0)} s${quick ? ' (quick mode: small samples, for checking the harness, not for quoting)' : ''}.`,
  '',
  `Machine: ${cpus()[0]?.model ?? 'unknown CPU'}, ${cpus().length} cores, ${fmt(totalmem() / 2 ** 30, 1)} GiB; Node ${process.version}; redis-server ${redisVersion}; ${P.runs} runs per figure unless stated, shown as median (min–max). Ratios are taken per round within this one run.`,
  '',
  'Where edge-limiter is slower than a peer, [PROFILES.md](PROFILES.md) gives the measured cause.',
  '',
];
const out = [...header, ...md].join('\n') + '\n';
writeFileSync(join(root, quick ? 'bench/RESULTS.quick.md' : 'bench/RESULTS.md'), out);
console.log(out);
log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s`);
