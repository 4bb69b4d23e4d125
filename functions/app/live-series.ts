// The live page's time series (Node server, METRICS_PORT): the last 15 minutes in a ring of 900
// one-second slots, fed by the limiter's onDecision and a once-a-second sample of limiter.stats().
// Memory is fixed at construction whatever the traffic: per slot, a count per policy and outcome, a
// log-bucketed histogram of store latency, and the sampled gauges.
import type { DecisionEvent, LimiterStats } from '../../src/limiter.js';
import { storeNotAsked } from '../../src/limiter/store-call.js';
import { OUTCOMES } from '../../src/limiter/decision-stats.js';

export const SLOTS = 900;
/** Latency histogram: bucket i holds durations that round to 2^(i/8) µs (at most 4.4 % off); 200 buckets reach 33 s. */
const BUCKETS = 200;
const PER_OCTAVE = 8;

/**
 * Answers that did not call the store say nothing about its latency (as in the Prometheus histogram). A
 * `local` answer follows a failed store call, timed like a store_error.
 */
const LOCAL_REASONS: ReadonlySet<string> = new Set(['deny_cache', 'lease']);

export type Circuit = LimiterStats['circuit'];
const CIRCUITS: readonly Circuit[] = ['closed', 'half-open', 'open'];

export interface LiveWindow {
  /** The second (epoch s) of the last slot: the current, still filling one. */
  now: number;
  /** The second of the first slot in every array below. */
  from: number;
  outcomes: readonly string[];
  /** Per policy, per outcome: take and acquire decisions in each second (peeks are not decisions). */
  decisions: Record<string, Record<string, number[]>>;
  /** Store latency in ms, per second; null in a second without a store call. */
  latency: { p50: (number | null)[]; p99: (number | null)[] };
  /** limiter.stats() as sampled in each second; null before the first sample. */
  pending: (number | null)[];
  leasedTokens: (number | null)[];
  circuit: (Circuit | null)[];
  /** Over every slot held (at most 15 minutes): store calls timed and their p50 and p99 in ms. */
  window: { storeCalls: number; p50: number | null; p99: number | null };
}

export interface LiveSeries {
  onDecision(event: DecisionEvent): void;
  /** Records limiter.stats() in the current second's slot. */
  sample(): void;
  /** The slots from `since` (epoch s; default: all held) to now, oldest first. */
  window(since?: number): LiveWindow;
}

export interface LiveSeriesOptions {
  policies: readonly string[];
  stats: () => LimiterStats;
  /** Outcome columns; a decision with another outcome is not counted here. @default decision-stats' OUTCOMES */
  outcomes?: readonly string[];
  /** Wall clock, ms, read once to anchor the monotonic one. @default Date.now */
  wallMs?: () => number;
  /** Monotonic clock, ms: slots advance with it, so a wall-clock step cannot reorder them. @default performance.now */
  monotonicMs?: () => number;
}

function bucketOf(ms: number): number {
  const us = ms * 1000;
  if (!(us > 1)) return 0;
  return Math.min(BUCKETS - 1, Math.round(Math.log2(us) * PER_OCTAVE));
}

/** The representative duration of a bucket, in ms, rounded to 3 significant digits. */
function msOf(bucket: number): number {
  return Number((2 ** (bucket / PER_OCTAVE) / 1000).toPrecision(3));
}

function quantile(hist: Uint32Array | Float64Array, offset: number, count: number, q: number): number | null {
  if (count === 0) return null;
  const rank = Math.max(1, Math.ceil(q * count));
  let seen = 0;
  for (let b = 0; b < BUCKETS; b++) {
    seen += hist[offset + b]!;
    if (seen >= rank) return msOf(b);
  }
  return msOf(BUCKETS - 1);
}

export function createLiveSeries(options: LiveSeriesOptions): LiveSeries {
  const policies = [...options.policies];
  const outcomes = options.outcomes ?? OUTCOMES;
  const policyIndex = new Map(policies.map((p, i) => [p, i]));
  const outcomeIndex = new Map(outcomes.map((o, i) => [o, i]));
  const perSlot = policies.length * outcomes.length;
  const wall0 = (options.wallMs ?? Date.now)();
  const monotonicMs = options.monotonicMs ?? (() => performance.now());
  const mono0 = monotonicMs();
  const second = () => Math.floor((wall0 + (monotonicMs() - mono0)) / 1000);
  const started = second();

  // The second each slot holds (-1: none yet), and its contents.
  const stamp = new Float64Array(SLOTS).fill(-1);
  const counts = new Uint32Array(SLOTS * perSlot);
  const hist = new Uint32Array(SLOTS * BUCKETS);
  const histCount = new Uint32Array(SLOTS);
  const pending = new Float64Array(SLOTS).fill(NaN);
  const leased = new Float64Array(SLOTS).fill(NaN);
  const circuit = new Int8Array(SLOTS).fill(-1);

  /** The slot of second `s`, cleared first when it still holds an older second. */
  function slot(s: number): number {
    const i = s % SLOTS;
    if (stamp[i] !== s) {
      stamp[i] = s;
      counts.fill(0, i * perSlot, (i + 1) * perSlot);
      hist.fill(0, i * BUCKETS, (i + 1) * BUCKETS);
      histCount[i] = 0;
      pending[i] = NaN;
      leased[i] = NaN;
      circuit[i] = -1;
    }
    return i;
  }

  return {
    onDecision(e) {
      const i = slot(second());
      const { decision } = e;
      if (!LOCAL_REASONS.has(decision.reason ?? '') && !storeNotAsked(e.error)) {
        hist[i * BUCKETS + bucketOf(e.durationMs)]!++;
        histCount[i]!++;
      }
      if (e.op === 'peek' || e.op === 'adjust' || e.op === 'settle') return;
      const p = policyIndex.get(e.policy);
      const o = outcomeIndex.get(decision.reason ?? (decision.allowed ? 'allowed' : 'denied'));
      if (p === undefined || o === undefined) return;
      counts[i * perSlot + p * outcomes.length + o]!++;
    },
    sample() {
      const i = slot(second());
      const s = options.stats();
      pending[i] = s.pendingStoreCalls;
      leased[i] = s.leases.tokens;
      circuit[i] = CIRCUITS.indexOf(s.circuit);
    },
    window(since) {
      const now = second();
      let from = Math.max(now - SLOTS + 1, started);
      if (since !== undefined && Number.isFinite(since)) from = Math.min(now, Math.max(from, Math.floor(since)));
      const n = now - from + 1;
      const decisions: LiveWindow['decisions'] = {};
      for (const p of policies) {
        decisions[p] = {};
        for (const o of outcomes) decisions[p]![o] = new Array<number>(n).fill(0);
      }
      const p50: (number | null)[] = new Array(n).fill(null);
      const p99: (number | null)[] = new Array(n).fill(null);
      const pend: (number | null)[] = new Array(n).fill(null);
      const tokens: (number | null)[] = new Array(n).fill(null);
      const circ: (Circuit | null)[] = new Array(n).fill(null);
      for (let k = 0; k < n; k++) {
        const s = from + k;
        const i = s % SLOTS;
        if (stamp[i] !== s) continue;
        for (let pi = 0; pi < policies.length; pi++) {
          for (let oi = 0; oi < outcomes.length; oi++) decisions[policies[pi]!]![outcomes[oi]!]![k] = counts[i * perSlot + pi * outcomes.length + oi]!;
        }
        p50[k] = quantile(hist, i * BUCKETS, histCount[i]!, 0.5);
        p99[k] = quantile(hist, i * BUCKETS, histCount[i]!, 0.99);
        if (!Number.isNaN(pending[i]!)) pend[k] = pending[i]!;
        if (!Number.isNaN(leased[i]!)) tokens[k] = leased[i]!;
        if (circuit[i]! >= 0) circ[k] = CIRCUITS[circuit[i]!]!;
      }
      // The whole window's latency, over every slot held.
      const total = new Float64Array(BUCKETS);
      let storeCalls = 0;
      for (let s = Math.max(now - SLOTS + 1, started); s <= now; s++) {
        const i = s % SLOTS;
        if (stamp[i] !== s || histCount[i] === 0) continue;
        storeCalls += histCount[i]!;
        for (let b = 0; b < BUCKETS; b++) total[b]! += hist[i * BUCKETS + b]!;
      }
      return {
        now,
        from,
        outcomes,
        decisions,
        latency: { p50, p99 },
        pending: pend,
        leasedTokens: tokens,
        circuit: circ,
        window: { storeCalls, p50: quantile(total, 0, storeCalls, 0.5), p99: quantile(total, 0, storeCalls, 0.99) },
      };
    },
  };
}
