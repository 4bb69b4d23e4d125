// Who is being limited, served: GET /v1/stats on the permit app (behind its bearer check on /v1/*), the
// snapshot of this node's decision counts and most refused keys (src/limiter/decision-stats.ts). Each
// node (Node process, Lambda container, Workers isolate) reports what it decided itself.
import type { Hono } from 'hono';
import type { DecisionEvent } from '../../src/limiter.js';
import type { DecisionStats } from '../../src/limiter/decision-stats.js';
import { problemResponse } from '../../src/http/problem.js';
import { grantOf, guard } from '../../src/http/auth.js';

type Hook = (event: DecisionEvent) => void;

/** One onDecision calling each hook in turn; one that throws does not keep the next from seeing the event. */
export function composeOnDecision(...hooks: (Hook | undefined)[]): Hook | undefined {
  const list = hooks.filter((h): h is Hook => h !== undefined);
  if (list.length <= 1) return list[0];
  return (event) => {
    for (const hook of list) {
      try {
        hook(event);
      } catch {
        // A hook must never change a decision, nor starve the hooks after it.
      }
    }
  };
}

/**
 * The JSON answer of GET /v1/stats and of the Node metrics port's /stats.json: of the policies in
 * `scope` only (a token's), so a token learns the keys of no other policy.
 */
export function statsResponse(stats: DecisionStats, scope: ReadonlySet<string> | '*' = '*'): Response {
  const snapshot = stats.snapshot();
  if (scope !== '*') snapshot.policies = Object.fromEntries(Object.entries(snapshot.policies).filter(([name]) => scope.has(name)));
  return new Response(JSON.stringify(snapshot), { headers: { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' } });
}

/** Adds GET /v1/stats to the permit app; its /v1/* bearer check, registered first, guards it, and it needs the `stats` right. */
export function serveStats(app: Hono, stats: DecisionStats): void {
  app.get('/v1/stats', guard('GET /v1/stats'), (c) => statsResponse(stats, grantOf(c)?.policies));
  app.all('/v1/stats', () => problemResponse('method-not-allowed', 'use GET', {}, { Allow: 'GET' }));
}
