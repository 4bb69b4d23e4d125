// Small helpers shared by the benchmark scripts: timing loops, percentiles, medians with spread.

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export interface Throughput {
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
}

/** Runs `op` `total` times with `concurrency` loops; measures each call's latency. */
export async function measure(total: number, concurrency: number, op: (i: number) => Promise<unknown>): Promise<Throughput> {
  const latencies = new Float64Array(total);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (;;) {
        const i = next++;
        if (i >= total) return;
        const s = performance.now();
        await op(i);
        latencies[i] = performance.now() - s;
      }
    }),
  );
  const elapsed = performance.now() - t0;
  const sorted = Array.from(latencies).sort((a, b) => a - b);
  return { opsPerSec: (total / elapsed) * 1000, p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99) };
}

/** Median and spread (min..max) of repeated figures. */
export interface Spread {
  median: number;
  min: number;
  max: number;
  runs: number;
}

export function spread(xs: number[]): Spread {
  const s = [...xs].sort((a, b) => a - b);
  return { median: s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2, min: s[0]!, max: s[s.length - 1]!, runs: s.length };
}

export function fmt(n: number, digits = 0): string {
  if (!Number.isFinite(n)) return String(n);
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

export function fmtSpread(s: Spread, digits = 0): string {
  return s.runs > 1 ? `${fmt(s.median, digits)} (${fmt(s.min, digits)}–${fmt(s.max, digits)})` : fmt(s.median, digits);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

import type { Redis as IORedis } from 'ioredis';
import { ScriptShaMap } from '../scripts/upstash-local/script-compat.js';

/**
 * The thin adapter that carries @upstash/ratelimit's Redis calls over an ioredis TCP connection:
 * it calls evalsha/eval as (sha, keys, args), ioredis wants (sha, numkeys, ...). Its scripts declare the
 * Upstash-only shebang flag `allow-key-locking`, which redis-server rejects, so the flag is stripped and
 * the SHA mapped (one EVALSHA per call in steady state, as on Upstash).
 */
export function upstashOverIoredis(io: IORedis) {
  const scripts = new ScriptShaMap();
  return {
    evalsha: (sha: string, keys: string[], args: unknown[]) => io.evalsha(scripts.sha(sha), keys.length, ...keys, ...args.map(String)),
    eval: (script: string, keys: string[], args: unknown[]) => io.eval(scripts.script(script), keys.length, ...keys, ...args.map(String)),
  };
}
