// Runs accuracy-worker.ts processes (optionally under faketime), starts them together, and scores the
// admitted count against the ideal. Shared by the benchmark (sections 5 and 6) and the contention test.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { sleep } from './lib.js';

const worker = fileURLToPath(new URL('./accuracy-worker.ts', import.meta.url));

export interface WorkerConfig {
  mode: 'http' | 'ours' | 'upstash';
  callers: number;
  durationMs: number;
  /** The bucket; `lease` turns token leases on (mode ours). */
  policy: { capacity: number; refillPerSecond: number; lease?: { tokens: number; maxAgeMs: number } };
  key: string;
  targets?: string[];
  /** Mode http: the policy named in each permit request. @default 'contention' */
  policyName?: string;
  token?: string;
  redisUrl?: string;
  /** Callers start this long after "go" (a late joiner). @default 0 */
  startDelayMs?: number;
}

export interface WorkerResult {
  admitted: number;
  decisions: number;
  errors: number;
  firstStart: number;
  firstEnd: number;
  lastStart: number;
  lastEnd: number;
  admittedAt: number[];
  /** The worker's wall clock minus ours when it got ready: its real skew. */
  skewSeenMs: number;
  /** How long a 50 ms timer measured in the worker (performance.now must stay usable under faketime). */
  perfCheckMs: number;
  /** When the worker read "go", on the system monotonic clock (ms). */
  goMonoMs: number;
}

/** Starts the workers, waits until all are ready, sends "go" to all at once, collects their results. */
export async function accuracyRun(runs: { config: WorkerConfig; skewSeconds?: number }[]): Promise<WorkerResult[]> {
  const children = runs.map(({ config, skewSeconds }) => {
    const args = ['--import', 'tsx', worker, JSON.stringify(config)];
    const child = skewSeconds
      ? spawn('faketime', ['-f', `${skewSeconds > 0 ? '+' : ''}${skewSeconds}s`, process.execPath, ...args], {
          stdio: ['pipe', 'pipe', 'inherit'],
          env: { ...process.env, FAKETIME_DONT_FAKE_MONOTONIC: '1' },
        })
      : spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'] });
    const lines: string[] = [];
    let buf = '';
    child.stdout!.on('data', (d) => {
      buf += d;
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        lines.push(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    });
    const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    return { child, lines, exited };
  });
  const until = Date.now() + 60_000;
  while (children.some((c) => c.lines.length < 1)) {
    if (Date.now() > until || children.some((c) => c.child.exitCode !== null)) {
      for (const c of children) c.child.kill('SIGKILL');
      throw new Error('accuracy workers did not get ready');
    }
    await sleep(20);
  }
  const parentWall = Date.now();
  const ready = children.map((c) => JSON.parse(c.lines[0]!) as { wallAtReady: number; perfCheckMs: number });
  for (const c of children) c.child.stdin!.write('go\n');
  const codes = await Promise.all(children.map((c) => c.exited));
  if (codes.some((c) => c !== 0)) throw new Error(`accuracy worker exit codes ${codes}`);
  const results = children.map((c, i) => ({ ...(JSON.parse(c.lines[1]!) as WorkerResult), skewSeenMs: ready[i]!.wallAtReady - parentWall, perfCheckMs: ready[i]!.perfCheckMs }));
  // Each worker's offsets count from when it read "go"; shift them onto the earliest worker's "go"
  // (the system monotonic clock is shared by the processes and not faked), so the ideal's window is
  // measured on one time base.
  const base = Math.min(...results.map((r) => r.goMonoMs));
  return results.map((r) => {
    const shift = r.goMonoMs - base;
    return {
      ...r,
      firstStart: r.firstStart + shift,
      firstEnd: r.firstEnd + shift,
      lastStart: r.lastStart + shift,
      lastEnd: r.lastEnd + shift,
      admittedAt: r.admittedAt.map((t) => t + shift),
    };
  });
}

export interface Accuracy {
  admitted: number;
  decisions: number;
  errors: number;
  /** Ideal admitted count, bracketed by the callers' first and last decision times. */
  idealMin: number;
  idealMax: number;
  over: number;
  under: number;
  underPct: number;
  admittedAt: number[];
}

export function score(results: WorkerResult[], policy: { capacity: number; refillPerSecond: number }): Accuracy {
  const admitted = results.reduce((a, r) => a + r.admitted, 0);
  const minSpan = Math.max(...results.map((r) => r.lastStart)) - Math.min(...results.map((r) => r.firstEnd));
  const maxSpan = Math.max(...results.map((r) => r.lastEnd)) - Math.min(...results.map((r) => r.firstStart));
  const idealMin = policy.capacity + (policy.refillPerSecond * minSpan) / 1000;
  const idealMax = policy.capacity + (policy.refillPerSecond * maxSpan) / 1000;
  return {
    admitted,
    decisions: results.reduce((a, r) => a + r.decisions, 0),
    errors: results.reduce((a, r) => a + r.errors, 0),
    idealMin,
    idealMax,
    over: Math.max(0, admitted - Math.floor(idealMax)),
    under: Math.max(0, Math.floor(idealMin) - admitted),
    underPct: (Math.max(0, idealMin - admitted) / idealMin) * 100,
    admittedAt: results.flatMap((r) => r.admittedAt).sort((a, b) => a - b),
  };
}
