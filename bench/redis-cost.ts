// Where the Redis-side cost of one decision goes: `node --import tsx bench/redis-cost.ts <redis port> [--variants]`.
// Prints the script time per decision (INFO commandstats usec of EVALSHA and EVAL, which includes the
// commands the script runs, divided by the decisions made, so a batched call counts once per key) for
// each Redis limiter at concurrency 1 and 16, for variants of our single-key script run by
// redis-benchmark, and for our automatic batches by concurrency, so that a cost claim in RESULTS.md
// or PROFILES.md rests on a measurement. Each figure is the median of 5 rounds, the variants
// interleaved within a round: this VM's speed drifts by tens of percent between minutes, and
// interleaving keeps the comparison within one period.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { Ratelimit } from '@upstash/ratelimit';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { GCRA_SCRIPT, GCRA_SCRIPT_SHA } from '../src/stores/redis-script.js';
import { scriptStats } from '../test/support/redis-stats.js';
import { measure, spread, upstashOverIoredis } from './lib.js';

const port = Number(process.argv[2] ?? 6379);
// --variants: only the variants of the single-key script (a minute, not several).
const variantsOnly = process.argv.includes('--variants');
const rounds = 5;
const io = new Redis(port);

const median = (xs: number[]) => spread(xs).median.toFixed(1);

const n = 20_000;
// The single-key script's ARGV for a take (gcra v12): the clock ("": TIME), the kind "t", no extra, the base
// and no policy-wide change, then per limit costUnits, limitUnits and refillUnitsPerUs: 1 unit of a
// 1e9-unit bucket refilling 1 per µs, as the limiter sends for the policy below (capacity 1e9 at 1e6/s).
// `limits` copies of that limit.
const take = (limits: number, now = '') => [now, 't', '', `0${',1,1000000000'.repeat(limits)}`, '', ...Array.from({ length: limits }, () => ['1', '1000000000', '1']).flat()];
const impls: Record<string, (i: number) => Promise<unknown>> = {
  'edge-limiter': ((l) => (i: number) => l.take('p', `k${i % 1000}`))(createLimiter({ store: redisStore({ client: io }), policies: { p: { capacity: 1e9, refillPerSecond: 1e6 } }, prefix: 'rc1:' })),
  '@upstash/ratelimit tokenBucket': ((r) => (i: number) => r.limit(`k${i % 1000}`))(
    new Ratelimit({ redis: upstashOverIoredis(io) as never, limiter: Ratelimit.tokenBucket(1000, '1 ms', 1e9), analytics: false, ephemeralCache: false, prefix: 'rc2' }),
  ),
  'rate-limiter-flexible RateLimiterRedis': ((r) => (i: number) => r.consume(`k${i % 1000}`))(new RateLimiterRedis({ storeClient: io, points: 1e9, duration: 1, keyPrefix: 'rc3' })),
  // Not a limiter: our script sent by hand, so the limiter's own client-side cost shows as the difference.
  'a bare ioredis EVALSHA of our script': (i: number) => io.call('EVALSHA', GCRA_SCRIPT_SHA, 1, `rc4:k${i % 1000}`, ...take(1)),
};
await io.script('LOAD', GCRA_SCRIPT);
if (!variantsOnly) {
  for (const concurrency of [1, 16]) {
    const usPerDecision: Record<string, number[]> = {};
    const perSec: Record<string, number[]> = {};
    for (const op of Object.values(impls)) await measure(2000, concurrency, op); // warm up, load the scripts
    for (let r = 0; r < rounds; r++) {
      for (const [name, op] of Object.entries(impls)) {
        const decisions = concurrency === 1 ? n / 4 : n;
        const before = (await scriptStats(io)).usec;
        (perSec[name] ??= []).push((await measure(decisions, concurrency, op)).opsPerSec);
        (usPerDecision[name] ??= []).push(((await scriptStats(io)).usec - before) / decisions);
      }
    }
    for (const [name, xs] of Object.entries(usPerDecision)) {
      console.log(`concurrency ${concurrency}, ${name}: ${median(xs)} µs of script time per decision, ${spread(perSec[name]!).median.toFixed(0)} decisions/s`);
    }
  }
}

/** The single-key script with its straight-line fast path switched off: every take goes the general way. */
function withoutFastPath(script: string): string {
  const from = "if A[2] == 't' and not op and";
  if (!script.includes(from)) throw new Error('bench/redis-cost.ts: the fast path no longer starts as this variant expects');
  return script.replace(from, 'if false and');
}

// Variants of the single-key script, each run by redis-benchmark on its own keys (concurrency 16, no
// batching). 'our script, general path' turns its straight-line take of up to three limits off, so every take
// goes through the closures, tables and patterns that other steps use. The last five are not limiters:
// the floor of three commands in one script, and that floor with the stored value formatted by '%.0f'
// or by '%d', as the scripts format it (glibc prints '%.0f' through its multi-precision float path).
const variants: Record<string, [string, string[]]> = {
  'our script': [GCRA_SCRIPT, take(1)],
  'our script, 2 limits': [GCRA_SCRIPT, take(2)],
  'our script, 3 limits': [GCRA_SCRIPT, take(3)],
  'our script, general path': [withoutFastPath(GCRA_SCRIPT), take(1)],
  'without TIME (caller clock)': [GCRA_SCRIPT, take(1, String(Date.now() * 1000))],
  'without the SET (read only)': [GCRA_SCRIPT.replace(/redis\.call\('SET'[^\n]*\n/, ''), take(1)],
  "rate-limiter-flexible's script (SET NX EX, INCRBY, PTTL)": [
    "redis.call('set', KEYS[1], 0, 'EX', ARGV[2], 'NX') local consumed = redis.call('incrby', KEYS[1], ARGV[1]) " +
      "local ttl = redis.call('pttl', KEYS[1]) if ttl == -1 then redis.call('expire', KEYS[1], ARGV[2]) ttl = 1000 * ARGV[2] end return {consumed, ttl}",
    ['1', '1'],
  ],
  'TIME, GET, SET PX and nothing else': ["local t = redis.call('TIME') redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], t[2], 'PX', '100000') return {1, '1'}", []],
  "TIME, GET, SET PX of a value formatted by '%.0f:%.0f'": [
    "local t = redis.call('TIME') local now = t[1] * 1000000 + t[2] redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], string.format('%.0f:%.0f', 5, now), 'PX', '100000') return {1, '1'}",
    [],
  ],
  "TIME, GET, SET PX of a value formatted by '%d:%d'": [
    "local t = redis.call('TIME') local now = t[1] * 1000000 + t[2] redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], string.format('%d:%d', 5, now), 'PX', '100000') return {1, '1'}",
    [],
  ],
  'an empty script (return 1)': ['return 1', []],
};
const shas = new Map<string, string>();
for (const [name, [script]] of Object.entries(variants)) shas.set(name, (await io.script('LOAD', script)) as string);
const variantUs: Record<string, number[]> = {};
for (let r = 0; r < rounds; r++) {
  for (const [name, [, args]] of Object.entries(variants)) {
    await io.config('RESETSTAT');
    execFileSync('redis-benchmark', ['-p', String(port), '-c', '16', '-n', String(n), '-r', '1000', '-q', 'EVALSHA', shas.get(name)!, '1', `rv:${shas.get(name)!.slice(0, 8)}:__rand_int__`, ...args]);
    const { calls, usec } = await scriptStats(io);
    (variantUs[name] ??= []).push(usec / calls);
  }
}
for (const [name, xs] of Object.entries(variantUs)) console.log(`variant ${name}: ${median(xs)} µs of script time per call`);

// The same variants with no per-call cost and little noise: each one's body run 2,000 times inside one
// EVALSHA (the first key only, so a take meets its own bucket), measured by Redis's main thread CPU time
// (its /proc schedstat, when the server runs on this machine; else the call's wall-clock time, which a
// busy VM inflates). 9 rounds, interleaved; the ratio to our script is taken per round.
const pid = /process_id:(\d+)/.exec(await io.info('server'))?.[1];
const cpuUs = (): number => {
  try {
    return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1000;
  } catch {
    return performance.now() * 1000;
  }
};
const loops = 2000;
const loopShas = new Map<string, string>();
for (const [name, [script]] of Object.entries(variants)) {
  loopShas.set(name, (await io.script('LOAD', `local function body()\n${script}\nend\nfor i = 1, ${loops} do body() end\nreturn 1`)) as string);
}
const loopUs: Record<string, number[]> = {};
for (let r = 0; r < 9; r++) {
  for (const [name, [, args]] of Object.entries(variants)) {
    const before = cpuUs();
    await io.evalsha(loopShas.get(name)!, 1, `rl:${loopShas.get(name)!.slice(0, 8)}`, ...args);
    (loopUs[name] ??= []).push((cpuUs() - before) / loops);
  }
}
for (const [name, xs] of Object.entries(loopUs)) {
  const ratio = spread(xs.map((x, r) => x / loopUs['our script']![r]!));
  console.log(`variant ${name}, its body in a loop: ${median(xs)} µs of Redis CPU per run, ÷ our script ${ratio.median.toFixed(2)} (${ratio.min.toFixed(2)}–${ratio.max.toFixed(2)})`);
}

if (!variantsOnly) {
  // How big automatic batches get, and what a decision then costs Redis: our limiter alone, by concurrency;
  // and at concurrency 64, a policy of 2 and of 3 limits (the same limit each time).
  const limit = { capacity: 1e9, refillPerSecond: 1e6 };
  const batched = createLimiter({
    store: redisStore({ client: io }),
    policies: { p: limit, p2: { limits: { a: limit, b: limit } }, p3: { limits: { a: limit, b: limit, c: limit } } },
    prefix: 'rc5:',
  });
  for (const [policy, concurrencies] of [['p', [1, 4, 16, 64, 256]], ['p2', [64]], ['p3', [64]]] as const) {
    const takeOne = (i: number) => batched.take(policy, `k${i % 1000}`);
    for (const concurrency of concurrencies) {
      await measure(2000, concurrency, takeOne); // warm up
      const calls: number[] = [];
      const usec: number[] = [];
      for (let r = 0; r < rounds; r++) {
        await io.config('RESETSTAT');
        await measure(n, concurrency, takeOne);
        const s = await scriptStats(io);
        calls.push(s.calls);
        usec.push(s.usec);
      }
      const c = spread(calls).median;
      const u = spread(usec).median;
      console.log(`batches of policy ${policy} at concurrency ${concurrency}: ${(n / c).toFixed(1)} decisions per script call, ${(u / n).toFixed(1)} µs of script time per decision, ${(u / c).toFixed(1)} per call`);
    }
  }
}
io.disconnect();
