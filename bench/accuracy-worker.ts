// One OS process of the accuracy benchmarks. It gets ready, waits for "go" on stdin, then runs N
// concurrent callers for durationMs against one bucket and prints one JSON line. All times it reports
// are monotonic offsets from "go" (performance.now is not shifted by faketime), so they stay comparable
// even when this process's wall clock is skewed on purpose.
//   mode http:           POST /v1/permits to the given servers, round robin
//   mode ours:           createLimiter + redisStore over ioredis, in this process
//   mode upstash:        @upstash/ratelimit tokenBucket over the same ioredis client (thin adapter)
// With startDelayMs, its callers join late (to model a fast-clock node arriving after slow-clock ones).
import { createInterface } from 'node:readline';
import { Redis as IORedis } from 'ioredis';
import { Ratelimit } from '@upstash/ratelimit';
import { createLimiter } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { upstashOverIoredis } from './lib.js';
import type { WorkerConfig } from './accuracy.js';

const config = JSON.parse(process.argv[2]!) as WorkerConfig;


let decide: () => Promise<boolean>;
/** Gives leased tokens back at the end (mode ours with leases). */
let closeLimiter: () => Promise<void> = async () => {};
let io: IORedis | undefined;
if (config.mode === 'http') {
  let n = 0;
  const targets = config.targets!;
  const body = JSON.stringify({ policy: config.policyName ?? 'contention', key: config.key });
  decide = async () => {
    const res = await fetch(`${targets[n++ % targets.length]}/v1/permits`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${config.token}`, 'Content-Type': 'application/json' },
      body,
    });
    const b = (await res.json()) as { allowed?: boolean; reason?: string };
    if ((b.reason && b.reason !== 'lease') || (res.status !== 200 && res.status !== 429)) throw new Error(`status ${res.status} ${b.reason ?? ''}`);
    return b.allowed === true;
  };
} else if (config.mode === 'ours') {
  io = new IORedis(config.redisUrl!);
  const limiter = createLimiter({ store: redisStore({ client: io }), policies: { c: config.policy }, timeoutMs: 5000, circuitBreaker: false });
  decide = async () => {
    const d = await limiter.take('c', config.key);
    if (d.reason && d.reason !== 'lease') throw new Error(d.reason);
    return d.allowed;
  };
  closeLimiter = () => limiter.close();
} else {
  io = new IORedis(config.redisUrl!);
  const intervalMs = 1000 / config.policy.refillPerSecond;
  const rl = new Ratelimit({
    redis: upstashOverIoredis(io) as never,
    // Its finest continuous-looking setting for this rate: 1 token every intervalMs, up to capacity.
    limiter: Ratelimit.tokenBucket(1, `${intervalMs} ms`, config.policy.capacity),
    analytics: false,
    ephemeralCache: false,
    timeout: 5000,
    prefix: 'bench-upstash',
  });
  decide = async () => (await rl.limit(config.key)).success;
}

const wallAtReady = Date.now();
// performance.now must stay usable under faketime: check that 50 ms of timer reads as ~50 ms.
const p0 = performance.now();
await new Promise((r) => setTimeout(r, 50));
const perfCheckMs = performance.now() - p0;
if (io) await io.ping();
if (config.targets) {
  // Open the keep-alive connections now, so the first decisions after "go" do not wait for them.
  await Promise.all(Array.from({ length: config.callers }, (_, i) => fetch(`${config.targets![i % config.targets!.length]}/healthz`).then((r) => r.arrayBuffer())));
}
process.stdout.write(`${JSON.stringify({ ready: true, wallAtReady, perfCheckMs })}\n`);
const rl = createInterface({ input: process.stdin });
await new Promise<void>((resolve) => rl.once('line', () => resolve()));
const go = performance.now();
// The system-wide monotonic clock (CLOCK_MONOTONIC, not faked): lets the parent put every worker's
// offsets on one time base, since each worker reads "go" a little later than the one before.
const goMonoMs = Number(process.hrtime.bigint()) / 1e6;
const deadline = go + config.durationMs;

let admitted = 0;
let decisions = 0;
let errors = 0;
let firstStart = Infinity;
let firstEnd = Infinity;
let lastStart = 0;
let lastEnd = 0;
const admittedAt: number[] = [];
// When each admitted request was sent: the store decided it between its start and admittedAt.
const admittedFrom: number[] = [];
let maxLatencyMs = 0;
if (config.startDelayMs) await new Promise((r) => setTimeout(r, config.startDelayMs));
await Promise.all(
  Array.from({ length: config.callers }, async () => {
    while (performance.now() < deadline) {
      const s = performance.now() - go;
      let ok = false;
      try {
        ok = await decide();
      } catch {
        errors++;
        continue;
      }
      const e = performance.now() - go;
      decisions++;
      firstStart = Math.min(firstStart, s);
      firstEnd = Math.min(firstEnd, e);
      lastStart = Math.max(lastStart, s);
      lastEnd = Math.max(lastEnd, e);
      maxLatencyMs = Math.max(maxLatencyMs, e - s);
      if (ok) {
        admitted++;
        admittedAt.push(e);
        admittedFrom.push(s);
      }
    }
  }),
);
await closeLimiter();
process.stdout.write(`${JSON.stringify({ admitted, decisions, errors, firstStart, firstEnd, lastStart, lastEnd, admittedAt, admittedFrom, maxLatencyMs, goMonoMs })}\n`);
io?.disconnect();
rl.close();
