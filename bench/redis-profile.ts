// Where the client's CPU goes per Redis decision, ours against rate-limiter-flexible's:
// `node --import tsx bench/redis-profile.ts [concurrency] [decisions]` (default 1 and 30,000).
// Starts its own redis-server; runs each limiter in a child process under `node --cpu-prof`, configured
// as in RESULTS.md section 1 (one ioredis connection, keys over 1,000 buckets, every decision allowed),
// with a warm-up of a fifth of the decisions; then prints the busy µs per decision of each and the
// functions whose self time per decision differs most. One run of each: repeat before trusting small
// differences on a noisy machine.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Redis as IORedis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { startRedis } from '../scripts/lib/redis-server.js';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { printDiff, profiled } from './cpu-profile.js';
import { measure } from './lib.js';

const HUGE = { capacity: 1_000_000_000, refillPerSecond: 1_000_000 };

if (process.argv[2] === 'child') {
  // The profiled process: one limiter, one connection.
  const [, , , impl, url, c, n] = process.argv;
  const io = new IORedis(url!);
  const ours = createLimiter({ store: redisStore({ client: io }), policies: { bench: HUGE }, prefix: 'p1:', circuitBreaker: false });
  const rlf = new RateLimiterRedis({ storeClient: io, points: HUGE.capacity, duration: 1, keyPrefix: 'p1f' });
  const op = impl === 'ours' ? (i: number) => ours.take('bench', `k${i % 1000}`) : (i: number) => rlf.consume(`k${i % 1000}`);
  await measure(Math.ceil(Number(n) / 5), Number(c), op);
  await measure(Number(n), Number(c), op);
  io.disconnect();
} else {
  const concurrency = Number(process.argv[2] ?? 1);
  const decisions = Number(process.argv[3] ?? 30_000);
  const redis = await startRedis();
  const self = fileURLToPath(import.meta.url);
  const profile = (impl: string) =>
    profiled(async (nodeArgs) => {
      const child = spawn(process.execPath, [...nodeArgs, '--import', 'tsx', self, 'child', impl, redis.url, String(concurrency), String(decisions)], { stdio: 'inherit' });
      const code = await new Promise((r) => child.once('exit', r));
      if (code !== 0) throw new Error(`profiled child ${impl} exited ${String(code)}`);
    });
  try {
    const rlf = await profile('rate-limiter-flexible');
    const ours = await profile('ours');
    console.log(`concurrency ${concurrency}, ${decisions} decisions after a warm-up of ${Math.ceil(decisions / 5)}`);
    printDiff({ label: 'rate-limiter-flexible', times: rlf }, { label: 'ours', times: ours }, decisions + Math.ceil(decisions / 5), 'decision', 30);
  } finally {
    await redis.stop();
  }
}
