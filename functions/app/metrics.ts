// Prometheus metrics for the Node server, fed by the limiter's onDecision hook (the library itself
// stays dependency-free). Served by functions/node.ts on METRICS_PORT, apart from the public port.
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { DecisionEvent } from '../../src/limiter.js';
import type { AuditEvent } from '../../src/limiter.js';
import { storeNotAsked } from '../../src/limiter/store-call.js';

export interface Metrics {
  registry: Registry;
  /** Pass as the limiter's onDecision. */
  onDecision(event: DecisionEvent): void;
  /** Pass as (or call from) the limiter's onAudit: counts administrative actions applied, by action and token name. */
  onAudit(event: AuditEvent): void;
}

/** Seconds; a store call over Redis or HTTP is 0.1-50 ms, a timeout is the policy's timeoutMs. */
const STORE_SECONDS_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/**
 * The `op` label. A reservation is `acquire` whichever call made it: `acquire()`, or a take with
 * maxWaitMs answered with a wait (the permit endpoint and the middleware only ever call take). A take
 * answered at once is `take`, even when it allowed a wait.
 */
function opOf(e: DecisionEvent): DecisionEvent['op'] {
  return e.op === 'take' && e.decision.waitMs > 0 ? 'acquire' : e.op;
}

/**
 * The `outcome` label: the decision's reason when it has one, else the bucket's answer. A peek takes
 * nothing and refuses nothing, so a peek the store answered is `read`, never `denied`.
 */
function outcomeOf(e: DecisionEvent): string {
  const { decision } = e;
  // An adjustment or a settlement the store applied (one it did not apply carries reason store_error),
  // on a blocked key too: a block refuses takes, not these, though their decision says `blocked`.
  if (e.op === 'adjust' || e.op === 'settle') return decision.reason === 'store_error' ? 'store_error' : 'applied';
  if (decision.reason) return decision.reason;
  if (e.op === 'peek') return 'read';
  return decision.allowed ? 'allowed' : 'denied';
}

/** `store`: the store's name, the histogram's label. `defaultMetrics`: also Node's process metrics. */
export function createMetrics(options: { store: string; defaultMetrics?: boolean }): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry });
  const decisions = new Counter({
    name: 'edge_limiter_decisions_total',
    help: 'Decisions by policy, operation (take: immediate; acquire: a reservation, by acquire() or a take answered with a wait; peek: a read; adjust: a cost settled after the fact) and outcome: allowed and denied by the bucket, read (a peek the store answered), store_error (the fail mode chose), deny_cache (refused locally), lease (answered from this node\'s token lease), local (the store failed: decided by this node\'s fallback bucket, onStoreError local), blocked (the key is blocked: refused whatever its bucket holds), applied (an adjustment the store applied).',
    labelNames: ['policy', 'op', 'outcome'] as const,
    registers: [registry],
  });
  const storeSeconds = new Histogram({
    name: 'edge_limiter_store_duration_seconds',
    help: 'Time of each decision that called the store, including failed and timed-out calls.',
    labelNames: ['store'] as const,
    buckets: STORE_SECONDS_BUCKETS,
    registers: [registry],
  });
  const adminActions = new Counter({
    name: 'edge_limiter_admin_actions_total',
    help: 'Administrative actions applied, by action (reset; adjust: an adjustment that names no charge; limits, policy-limits, block, unblock: runtime limits and blocks) and the name of the permit API token that asked (empty: a call of the library itself).',
    labelNames: ['action', 'token'] as const,
    registers: [registry],
  });
  return {
    registry,
    onAudit(e) {
      // A failed action (the store did not answer or refused it) was not applied: its audit line says so.
      if (e.error === undefined) adminActions.inc({ action: e.action, token: e.actor ?? '' });
    },
    onDecision(e) {
      const { decision } = e;
      decisions.inc({ policy: e.policy, op: opOf(e), outcome: outcomeOf(e) });
      // Answers that did not call the store (deny cache, lease, open circuit) say nothing about its latency.
      if (decision.reason !== 'deny_cache' && decision.reason !== 'lease' && !storeNotAsked(e.error)) storeSeconds.observe({ store: options.store }, e.durationMs / 1000);
    },
  };
}
