// Where the Redis-side cost of one decision goes: `node --import tsx bench/redis-cost.ts <redis port>`.
// Prints the script time per decision (INFO commandstats usec of EVALSHA, which includes the commands
// the script runs) for each Redis limiter at concurrency 16, and for variants of our script run by
// redis-benchmark, so that a cost claim in RESULTS.md rests on a measurement.
import { execFileSync } from 'node:child_process';
import { Redis } from 'ioredis';
import { Ratelimit } from '@upstash/ratelimit';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { GCRA_SCRIPT } from '../src/stores/redis-script.js';
import { measure, upstashOverIoredis } from './lib.js';

const port = Number(process.argv[2] ?? 6379);
const io = new Redis(port);

async function scriptUsPerCall(): Promise<string> {
  const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(await io.info('commandstats'));
  return m ? (Number(m[2]) / Number(m[1])).toFixed(2) : 'n/a';
}

const n = 20_000;
const impls: Record<string, (i: number) => Promise<unknown>> = {
  'edge-limiter': ((l) => (i: number) => l.take('p', `k${i % 1000}`))(createLimiter({ store: redisStore({ client: io }), policies: { p: { capacity: 1e9, refillPerSecond: 1e6 } }, prefix: 'rc1:' })),
  '@upstash/ratelimit tokenBucket': ((r) => (i: number) => r.limit(`k${i % 1000}`))(
    new Ratelimit({ redis: upstashOverIoredis(io) as never, limiter: Ratelimit.tokenBucket(1000, '1 ms', 1e9), analytics: false, ephemeralCache: false, prefix: 'rc2' }),
  ),
  'rate-limiter-flexible RateLimiterRedis': ((r) => (i: number) => r.consume(`k${i % 1000}`))(new RateLimiterRedis({ storeClient: io, points: 1e9, duration: 1, keyPrefix: 'rc3' })),
};
for (const [name, op] of Object.entries(impls)) {
  await measure(2000, 16, op); // warm up, load the script
  await io.config('RESETSTAT');
  await measure(n, 16, op);
  console.log(`${name}: ${await scriptUsPerCall()} µs of script time per decision`);
}

const variants: Record<string, [string, string]> = {
  'our script': [GCRA_SCRIPT, ''],
  'without TIME (caller clock)': [GCRA_SCRIPT, String(Date.now())],
  'with tostring instead of %.17g': [GCRA_SCRIPT.replaceAll("string.format('%.17g', ", 'tostring('), ''],
  'without the SET (read only)': [GCRA_SCRIPT.replace(/redis\.call\('SET'[^\n]*\n/, ''), ''],
};
for (const [name, [script, now]] of Object.entries(variants)) {
  const sha = (await io.script('LOAD', script)) as string;
  await io.config('RESETSTAT');
  execFileSync('redis-benchmark', ['-p', String(port), '-c', '16', '-n', String(n), '-r', '1000', '-q', 'EVALSHA', sha, '1', `rv:${name.length}:__rand_int__`, '0.001', '1000000000', now]);
  console.log(`variant ${name}: ${await scriptUsPerCall()} µs of script time per decision`);
}
io.disconnect();
