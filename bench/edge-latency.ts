// Section 10 of `npm run bench`: decisions with realistic store latency. A delay proxy
// (scripts/lib/delay-proxy.ts) adds a fixed delay each way in front of the one redis-server; each
// implementation gets its own ioredis connection through it. Open-loop load (requests arrive on a fixed
// schedule, whatever the answers take), so latency is what a request waits for its decision.
import { Redis as IORedis } from 'ioredis';
import { Ratelimit } from '@upstash/ratelimit';
import { createLimiter, type PolicyConfig } from '../src/index.js';
import { redisStore } from '../src/stores/redis.js';
import { startDelayProxy } from '../scripts/lib/delay-proxy.js';
import { fmt, percentile, sleep, upstashOverIoredis } from './lib.js';

interface Pattern {
  name: string;
  policy: { capacity: number; refillPerSecond: number };
  /** Requests per second, and the key of request i. */
  ratePerSec: number;
  requests: number;
  key(i: number): string;
  /** Requests issued first, at the same rate, and not counted (a warm connection and lease). */
  warmup: number;
  /** Admitted count a perfect limiter would give over `elapsedMs`. */
  ideal(requests: number, elapsedMs: number): number;
}

interface Impl {
  name: string;
  /** Returns whether the request was admitted and whether it was answered without waiting on the store. */
  make(io: IORedis, policy: Pattern['policy'], prefix: string): { decide(key: string): Promise<{ allowed: boolean; local: boolean }>; close(): Promise<void> };
}

const ours = (name: string, extra: { lease?: PolicyConfig['lease']; denyCache?: boolean }): Impl => ({
  name,
  make(io, policy, prefix) {
    const limiter = createLimiter({
      store: redisStore({ client: io }),
      policies: { p: { ...policy, ...(extra.lease ? { lease: extra.lease } : {}) } },
      prefix,
      timeoutMs: 5000,
      ...(extra.denyCache ? { denyCache: true } : {}),
    });
    return {
      async decide(key) {
        const d = await limiter.take('p', key);
        if (d.reason === 'store_error') throw new Error('store_error');
        return { allowed: d.allowed, local: d.reason === 'lease' || d.reason === 'deny_cache' };
      },
      close: () => limiter.close(),
    };
  },
});

const IMPLS: Impl[] = [
  ours('edge-limiter', {}),
  ours('edge-limiter, leases N = 10', { lease: { tokens: 10, maxAgeMs: 2000 } }),
  ours('edge-limiter, leases N = 100', { lease: { tokens: 100, maxAgeMs: 2000 } }),
  ours('edge-limiter, deny cache', { denyCache: true }),
  {
    name: '@upstash/ratelimit, ephemeral cache',
    make(io, policy, prefix) {
      const intervalMs = 1000 / policy.refillPerSecond;
      const rl = new Ratelimit({
        redis: upstashOverIoredis(io) as never,
        limiter: Ratelimit.tokenBucket(1, `${intervalMs} ms`, policy.capacity),
        analytics: false,
        ephemeralCache: new Map(),
        timeout: 5000,
        prefix,
      });
      return {
        async decide(key) {
          const r = await rl.limit(key);
          return { allowed: r.success, local: r.reason === 'cacheBlock' };
        },
        close: async () => {},
      };
    },
  },
];

async function scriptCalls(admin: IORedis): Promise<number> {
  const info = await admin.info('commandstats');
  return ['evalsha', 'eval'].reduce((n, c) => n + Number(new RegExp(`cmdstat_${c}:calls=(\\d+)`).exec(info)?.[1] ?? 0), 0);
}

interface Result {
  impl: string;
  p50: number;
  p99: number;
  localPct: number;
  callsPerDecision: number;
  admitted: number;
  ideal: number;
  decisions: number;
}

async function runOne(admin: IORedis, url: string, pattern: Pattern, impl: Impl, tag: string): Promise<Result> {
  const io = new IORedis(url, { enableAutoPipelining: false });
  await io.ping();
  const { decide, close } = impl.make(io, pattern.policy, `edge:${tag}:`);
  // Warm-up at the same rate on the same key(s), not counted (for the hot key under its limit: it starts
  // the lease and its background refills as a running service has them).
  const warm: Promise<unknown>[] = [];
  const warmGo = performance.now();
  for (let i = 0; i < pattern.warmup; i++) {
    const wait = warmGo + (i * 1000) / pattern.ratePerSec - performance.now();
    if (wait >= 1) await sleep(wait);
    warm.push(decide(pattern.key(i)));
  }
  await Promise.all(warm);
  const before = await scriptCalls(admin);
  const latencies: number[] = [];
  let admitted = 0;
  let local = 0;
  let errors = 0;
  const inFlight: Promise<void>[] = [];
  const go = performance.now();
  // Open loop: request i is issued at go + i / rate, whatever earlier answers take.
  for (let i = 0; i < pattern.requests; i++) {
    const due = go + (i * 1000) / pattern.ratePerSec;
    const wait = due - performance.now();
    if (wait >= 1) await sleep(wait);
    const t0 = performance.now();
    inFlight.push(
      decide(pattern.key(i)).then(
        (r) => {
          latencies.push(performance.now() - t0);
          if (r.allowed) admitted++;
          if (r.local) local++;
        },
        () => void errors++,
      ),
    );
  }
  await Promise.all(inFlight);
  const elapsedMs = performance.now() - go;
  await close(); // leases give their tokens back: those calls count too
  await sleep(50);
  const calls = (await scriptCalls(admin)) - before;
  io.disconnect();
  if (errors > 0) throw new Error(`${impl.name}: ${errors} errors`);
  latencies.sort((a, b) => a - b);
  return {
    impl: impl.name,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    localPct: (local / pattern.requests) * 100,
    callsPerDecision: calls / pattern.requests,
    admitted,
    ideal: pattern.ideal(pattern.requests, elapsedMs),
    decisions: pattern.requests,
  };
}

export async function edgeLatencySection(options: { redisPort: number; admin: IORedis; quick: boolean; log: (...a: unknown[]) => void }): Promise<string[]> {
  const { quick, admin, log } = options;
  const delays = quick ? [20] : [1, 20, 80];
  const seconds = quick ? 1 : 3;
  const coldKeys = quick ? 2000 : 10_000;
  let run = 0;
  const patterns = (): Pattern[] => {
    const id = `${Date.now()}-${run++}`;
    return [
      {
        name: `hot key, 500 req/s under a limit of 1000/s (capacity 1000), ${seconds} s`,
        policy: { capacity: 1000, refillPerSecond: 1000 },
        ratePerSec: 500,
        requests: 500 * seconds,
        warmup: 100,
        key: () => `hot-${id}`,
        ideal: (n) => n,
      },
      {
        name: `hot key, 1000 req/s over a limit of 250/s (capacity 250), ${seconds} s`,
        policy: { capacity: 250, refillPerSecond: 250 },
        ratePerSec: 1000,
        requests: 1000 * seconds,
        warmup: 0,
        key: () => `over-${id}`,
        ideal: (n, elapsedMs) => Math.min(n, Math.floor(250 + (250 * elapsedMs) / 1000)),
      },
      {
        name: `${fmt(coldKeys)} cold keys, one request each, 2000 req/s (capacity 100, 10/s)`,
        policy: { capacity: 100, refillPerSecond: 10 },
        ratePerSec: 2000,
        requests: coldKeys,
        warmup: 0,
        key: (i) => `cold-${id}-${i}`,
        ideal: (n) => n,
      },
    ];
  };

  const md: string[] = [
    '## 10. Edge latency: a store 1, 20 and 80 ms away',
    '',
    `Hot key under its limit: 100 warm-up requests at the same rate first, not counted. A TCP delay proxy (scripts/lib/delay-proxy.ts) in front of the same redis-server adds the stated delay each way, so every store round trip costs twice that. Load is open-loop: requests arrive on a fixed schedule. *Latency* is the time a request waits for its decision; *local* is the share answered without waiting on the store (edge-limiter: reason \`lease\` or \`deny_cache\`; @upstash/ratelimit: reason \`cacheBlock\`); *store calls* are script calls counted by Redis (INFO commandstats) per decision, including lease refunds at \`close()\`; *ideal* is what a perfect limiter admits for that demand.${quick ? ' Quick mode: 20 ms only, short runs.' : ''}`,
    '',
  ];
  const summary: Record<string, Result> = {};
  for (const delay of delays) {
    const proxy = await startDelayProxy({ host: '127.0.0.1', port: options.redisPort }, delay);
    md.push(`### ${delay} ms each way (${delay * 2} ms round trip)`, '');
    for (const [patternIndex, pattern] of patterns().entries()) {
      log(`edge latency: ${delay} ms, ${pattern.name}`);
      md.push(`**${pattern.name}**`, '', '| implementation | latency p50 ms | p99 ms | local | store calls / decision | admitted | ideal |', '| --- | ---: | ---: | ---: | ---: | ---: | ---: |');
      for (const impl of IMPLS) {
        const r = await runOne(admin, proxy.url, pattern, impl, `${delay}-${run}-${IMPLS.indexOf(impl)}`);
        summary[`${delay}|${patternIndex}|${impl.name}`] = r;
        md.push(`| ${r.impl} | ${fmt(r.p50, 3)} | ${fmt(r.p99, 3)} | ${fmt(r.localPct, 1)} % | ${r.callsPerDecision.toFixed(3)} | ${fmt(r.admitted)} | ${fmt(r.ideal)} |`);
      }
      md.push('');
    }
    await proxy.close();
  }
  // The targets, read from the 20 ms rows of the hot key under its limit.
  const hot = (impl: string) => summary[`20|0|${impl}`];
  const rows: string[] = [];
  for (const n of [10, 100]) {
    const r = hot(`edge-limiter, leases N = ${n}`);
    if (!r) continue;
    rows.push(
      `| leases N = ${n} | ${fmt(r.localPct, 1)} % (≥ 95 %) | ${fmt(r.p50, 3)} / ${fmt(r.p99, 3)} ms (< 0.1 / < 1) | ${r.callsPerDecision.toFixed(4)} (≤ ${(1.1 / n).toFixed(4)}) | ${fmt(r.ideal - r.admitted)} |`,
    );
  }
  md.push(
    '**Targets (20 ms each way, hot key under its limit)**',
    '',
    '| setting | answered locally | added latency p50 / p99 | store calls / decision | under-admission |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
  );
  return md;
}
