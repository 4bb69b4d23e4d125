// Who is being limited, served: GET /v1/stats on the permit app (behind its bearer check on /v1/*), the
// snapshot of this node's decision counts and most refused keys (src/limiter/decision-stats.ts). Each
// node (Node process, Lambda container, Workers isolate) reports what it decided itself.
import type { Hono } from 'hono';
import type { DecisionEvent } from '../../src/limiter.js';
import type { DecisionStats } from '../../src/limiter/decision-stats.js';
import { problemResponse } from '../../src/http/problem.js';

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

/** The JSON answer of GET /v1/stats and of the Node metrics port's /stats.json. */
export function statsResponse(stats: DecisionStats): Response {
  return new Response(JSON.stringify(stats.snapshot()), { headers: { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' } });
}

/** Adds GET /v1/stats to the permit app; its /v1/* bearer check, registered first, guards it. */
export function serveStats(app: Hono, stats: DecisionStats): void {
  app.get('/v1/stats', () => statsResponse(stats));
  app.all('/v1/stats', () => problemResponse('method-not-allowed', 'use GET', {}, { Allow: 'GET' }));
}
