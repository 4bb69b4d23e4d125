// Runs the contention workers as separate OS processes and sums what they admitted.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const worker = fileURLToPath(new URL('./contention-worker.ts', import.meta.url));

export interface ContentionResult {
  admitted: number;
  decisions: number;
  errors: number;
  /** Store time the run spanned is within [minSpanMs, maxSpanMs]. */
  minSpanMs: number;
  maxSpanMs: number;
}

export async function runContention(opts: {
  redisUrl: string;
  policy: { capacity: number; refillPerSecond: number };
  processes: number;
  callersPerProcess: number;
  durationMs: number;
  key: string;
  /** Extra env per process index, e.g. a faketime offset. */
  env?: (i: number) => Record<string, string>;
}): Promise<ContentionResult> {
  const startAt = performance.timeOrigin + performance.now() + 2500;
  const runs = Array.from({ length: opts.processes }, (_, i) =>
    new Promise<Record<string, number>>((resolve, reject) => {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', worker, opts.redisUrl, JSON.stringify(opts.policy), String(opts.callersPerProcess), String(startAt), String(opts.durationMs), opts.key],
        { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...(opts.env?.(i) ?? {}) } },
      );
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (err += d));
      child.on('exit', (code) => {
        if (code !== 0) return reject(new Error(`worker ${i} exited ${code}: ${err}`));
        try {
          resolve(JSON.parse(out.trim().split('\n').pop()!));
        } catch {
          reject(new Error(`worker ${i} printed ${out} ${err}`));
        }
      });
    }),
  );
  const results = await Promise.all(runs);
  const sum = (k: string) => results.reduce((a, r) => a + r[k]!, 0);
  const firstStart = Math.min(...results.map((r) => r.firstStart!));
  const firstEnd = Math.min(...results.map((r) => r.firstEnd!));
  const lastStart = Math.max(...results.map((r) => r.lastStart!));
  const lastEnd = Math.max(...results.map((r) => r.lastEnd!));
  return {
    admitted: sum('admitted'),
    decisions: sum('decisions'),
    errors: sum('errors'),
    minSpanMs: lastStart - firstEnd,
    maxSpanMs: lastEnd - firstStart,
  };
}
