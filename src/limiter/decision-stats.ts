// Who is being limited, on this node: per policy, decisions counted by outcome, and a bounded summary of
// the keys refused most often (space-saving, ./heavy-hitters.ts: at most `topKeys` entries per policy
// whatever the traffic). Fed by the limiter's onDecision hook; keys are recorded as the limiter saw them
// (the key passed to take: a header key's SHA-256, an IPv6 client's /64).
import type { DecisionEvent } from './types.js';
import { createHeavyHitters, type HeavyHitters } from './heavy-hitters.js';

/** The outcomes every policy reports, zero until seen. A decision's `reason`, else allowed/denied. */
export const OUTCOMES = ['allowed', 'denied', 'store_error', 'deny_cache', 'lease', 'local', 'blocked'] as const;

/** The default number of refused keys kept per policy. */
export const DEFAULT_TOP_KEYS = 100;
/** The most refused keys kept per policy (memory: about 200 bytes per entry plus the key). */
export const MAX_TOP_KEYS = 10_000;

export interface DecisionStatsOptions {
  /** Refused keys kept per policy; 0 keeps none (counters only). @default 100 */
  topKeys?: number;
  /** Policies reported from the start, with zero counts, before any decision names them. */
  policies?: readonly string[];
  /** Wall clock for first and last seen, in ms. @default Date.now */
  nowMs?: () => number;
}

/** One refused key: `count` refusals at most, `count - error` at least (space-saving's bounds). */
export interface RefusedKey {
  key: string;
  count: number;
  error: number;
  /** ISO time the key entered the summary. */
  firstSeen: string;
  /** ISO time of its last refusal. */
  lastSeen: string;
}

export interface PolicyDecisionStats {
  /**
   * take and acquire decisions by outcome: `allowed` and `denied` by the bucket, or the decision's
   * reason (`store_error`, `deny_cache`, `lease`, `local`, `blocked`, and any reason a later limiter adds).
   */
  decisions: Record<string, number>;
  /** peek calls (they read a bucket and refuse nothing, so no outcome above counts them). */
  peeks: number;
  /** Refusals counted into the summary: take and acquire decisions not allowed, other than store_error. */
  refused: number;
  /** The most refused keys, most first; empty when topKeys is 0. */
  topRefused: RefusedKey[];
}

export interface DecisionStatsSnapshot {
  /** ISO time counting started. */
  since: string;
  /** Refused keys kept per policy (0: the summary is off). */
  topKeys: number;
  policies: Record<string, PolicyDecisionStats>;
}

export interface DecisionStats {
  /** Pass as (or call from) the limiter's onDecision. */
  onDecision(event: DecisionEvent): void;
  /** The counts now; `limit` caps the refused keys listed per policy (default all kept). */
  snapshot(limit?: number): DecisionStatsSnapshot;
  /** Refused keys kept per policy. */
  readonly topKeys: number;
}

interface PolicyState {
  decisions: Record<string, number>;
  peeks: number;
  refused: HeavyHitters | undefined;
  refusedCount: number;
}

export function createDecisionStats(options: DecisionStatsOptions = {}): DecisionStats {
  const topKeys = options.topKeys ?? DEFAULT_TOP_KEYS;
  if (!Number.isInteger(topKeys) || topKeys < 0 || topKeys > MAX_TOP_KEYS) {
    throw new RangeError(`[edge-limiter] topKeys must be an integer from 0 to ${MAX_TOP_KEYS}, got ${String(topKeys)}`);
  }
  const nowMs = options.nowMs ?? Date.now;
  const since = new Date(nowMs()).toISOString();
  // Bounded by the limiter's policies: it emits events only for policies it validated.
  const byPolicy = new Map<string, PolicyState>();

  function stateOf(policy: string): PolicyState {
    let s = byPolicy.get(policy);
    if (!s) {
      const decisions: Record<string, number> = {};
      for (const o of OUTCOMES) decisions[o] = 0;
      s = { decisions, peeks: 0, refused: topKeys > 0 ? createHeavyHitters(topKeys) : undefined, refusedCount: 0 };
      byPolicy.set(policy, s);
    }
    return s;
  }
  for (const p of options.policies ?? []) stateOf(p);

  return {
    topKeys,
    onDecision(event) {
      const s = stateOf(event.policy);
      if (event.op === 'peek') {
        s.peeks++;
        return;
      }
      // An adjustment or a settlement settles a cost after the fact: it admits or refuses nothing.
      if (event.op === 'adjust' || event.op === 'settle') return;
      const { decision } = event;
      const outcome = decision.reason ?? (decision.allowed ? 'allowed' : 'denied');
      s.decisions[outcome] = (s.decisions[outcome] ?? 0) + 1;
      // A refusal by the store's fail mode says nothing about the key (everyone is refused while the
      // store is down): only refusals by the bucket, wherever answered, name who is being limited.
      if (!decision.allowed && decision.reason !== 'store_error') {
        s.refusedCount++;
        s.refused?.add(event.key, nowMs());
      }
    },
    snapshot(limit) {
      const policies: Record<string, PolicyDecisionStats> = {};
      for (const [name, s] of byPolicy) {
        policies[name] = {
          decisions: { ...s.decisions },
          peeks: s.peeks,
          refused: s.refusedCount,
          topRefused: (s.refused?.top(limit) ?? []).map((e) => ({
            key: e.key,
            count: e.count,
            error: e.error,
            firstSeen: new Date(e.firstSeenMs).toISOString(),
            lastSeen: new Date(e.lastSeenMs).toISOString(),
          })),
        };
      }
      return { since, topKeys, policies };
    },
  };
}
