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
  /** When each admitted request got its answer, and when it was sent (ms since "go"). */
  admittedAt: number[];
  admittedFrom: number[];
  /** The longest any of the worker's decisions took, sent to answered (ms). */
  maxLatencyMs: number;
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
      admittedFrom: r.admittedFrom.map((t) => t + shift),
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
  /** The most any window of the run admitted beyond capacity + rate × its length (see windowOver). */
  windowOver: number;
  /** The most any window of the run admitted below what the store must have admitted in it (see windowUnder). */
  windowUnder: number;
}

/** What the scoring allows beyond the exact bucket: token leases' stated bounds. */
export interface Allowance {
  /** Leased tokens may be spent up to this long after the store counted them: windows stretch by it. */
  spendLagMs?: number;
  /** Tokens that may sit unused in leases (nodes × tokens): under-admission allowed per window. */
  heldTokens?: number;
}

/**
 * Over-admission in every window, from the requests' own times: the store decided each admission
 * between its request's start and its answer, so the admissions i..j (ordered by answer) were decided
 * within [the earliest start among them, answer j], and no window of the store's clock of length T may
 * admit more than capacity + rate × T. The worst excess over all i, j (0 when exact). Sound: it never
 * blames the limiter for the latency of the requests.
 */
export function windowOver(from: number[], at: number[], policy: { capacity: number; refillPerSecond: number }, allowance: Allowance = {}): number {
  const order = at.map((_, i) => i).sort((a, b) => at[a]! - at[b]!);
  let worst = 0;
  for (let j = 0; j < order.length; j++) {
    let earliest = Infinity;
    for (let i = j; i >= 0; i--) {
      earliest = Math.min(earliest, from[order[i]!]!);
      const spanMs = at[order[j]!]! - earliest + (allowance.spendLagMs ?? 0);
      const bound = Math.floor(policy.capacity + (policy.refillPerSecond * spanMs) / 1000 + 1e-9);
      worst = Math.max(worst, j - i + 1 - bound);
    }
  }
  return worst;
}

/**
 * Under-admission in every window of a run whose callers never stop asking: over any window [a, b]
 * of the store's clock the bucket refills rate × (b − a) tokens, and all but the one token it may still
 * hold at b (a fraction, and whatever arrives in the moment between two requests) must be taken. A
 * request answered in [a, b] was decided at most maxLatencyMs before its answer, so the answers in
 * [a, b] include every admission the store made in [a, b − maxLatencyMs]: at least
 * floor(rate × (b − a − maxLatencyMs)) − 1 of them. The worst shortfall over windows on a 10 ms grid
 * between the first answer and the last request (0 when no window starves).
 */
export function windowUnder(
  at: number[],
  span: { fromMs: number; toMs: number; maxLatencyMs: number },
  policy: { refillPerSecond: number },
  allowance: Allowance = {},
): number {
  const sorted = [...at].sort((a, b) => a - b);
  const countUpTo = (t: number) => {
    let lo = 0;
    let hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (sorted[mid]! <= t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  let worst = 0;
  const grid: number[] = [];
  for (let t = span.fromMs; t <= span.toMs; t += 10) grid.push(t);
  for (let x = 0; x < grid.length; x++) {
    const a = grid[x]!;
    const before = countUpTo(a - 1e-9);
    for (let y = x + 1; y < grid.length; y++) {
      const b = grid[y]!;
      const need = Math.floor((policy.refillPerSecond * (b - a - span.maxLatencyMs)) / 1000) - 1 - (allowance.heldTokens ?? 0);
      if (need <= 0) continue;
      worst = Math.max(worst, need - (countUpTo(b) - before));
    }
  }
  return worst;
}

export function score(results: WorkerResult[], policy: { capacity: number; refillPerSecond: number }, allowance: Allowance = {}): Accuracy {
  const admitted = results.reduce((a, r) => a + r.admitted, 0);
  const minSpan = Math.max(...results.map((r) => r.lastStart)) - Math.min(...results.map((r) => r.firstEnd));
  const maxSpan = Math.max(...results.map((r) => r.lastEnd)) - Math.min(...results.map((r) => r.firstStart));
  const idealMin = policy.capacity + (policy.refillPerSecond * minSpan) / 1000;
  const idealMax = policy.capacity + (policy.refillPerSecond * maxSpan) / 1000;
  const admittedAt = results.flatMap((r) => r.admittedAt);
  const admittedFrom = results.flatMap((r) => r.admittedFrom);
  // Under-admission per window where callers were asking: from the first answer to the last request
  // (hundreds of callers per process keep asking throughout, late joiners included).
  const span = {
    fromMs: Math.min(...results.map((r) => r.firstEnd)),
    toMs: Math.max(...results.map((r) => r.lastStart)),
    maxLatencyMs: Math.max(...results.map((r) => r.maxLatencyMs)),
  };
  return {
    admitted,
    decisions: results.reduce((a, r) => a + r.decisions, 0),
    errors: results.reduce((a, r) => a + r.errors, 0),
    idealMin,
    idealMax,
    over: Math.max(0, admitted - Math.floor(idealMax)),
    under: Math.max(0, Math.floor(idealMin) - admitted),
    underPct: (Math.max(0, idealMin - admitted) / idealMin) * 100,
    admittedAt: [...admittedAt].sort((a, b) => a - b),
    windowOver: windowOver(admittedFrom, admittedAt, policy, allowance),
    windowUnder: windowUnder(admittedAt, span, policy, allowance),
  };
}
