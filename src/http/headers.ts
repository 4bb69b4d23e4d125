// The one place rate-limit response headers are made, shared by the middleware, the gateway and the
// permit endpoint. Fields of draft-ietf-httpapi-ratelimit-headers-11 plus the legacy X-RateLimit-* trio.
import type { Decision, LimitDecision, LimitNumbers } from '../core/decision.js';
import type { ResolvedPolicy } from '../core/policy.js';
import { windowSecondsOf } from '../limiter/in-force.js';

const seconds = (ms: number) => Math.ceil(ms / 1000);

/**
 * - `RateLimit-Policy: "<name>";q=<capacity>;w=<seconds to refill an empty bucket>`
 * - `RateLimit: "<name>";r=<remaining>;t=<seconds until the bucket is full again>`
 * - `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (same numbers; Reset is delta seconds),
 *   unless `legacy` is false
 * - `Retry-After: <whole seconds, rounded up>` on a refusal
 * - `X-RateLimit-Reason` when the answer is not the store's decision on this request: the decision's
 *   reason (DecisionReason: store_error, deny_cache, lease, local, blocked)
 * A `local` decision (the store failed; onStoreError 'local') was made by this node's fallback bucket, so
 * every number, the policy's `q` and `w` and X-RateLimit-Limit included, is the local limit's.
 * When the store did not answer (reason store_error) it gave no remaining count or reset time, so
 * `RateLimit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` are left out rather than guessed; the
 * policy headers still describe the configured limit.
 * A policy with several limits lists each, as draft-11 allows, named `"<policy>.<limit>"`:
 * `RateLimit-Policy: "api.burst";q=10;w=1, "api.daily";q=1000;w=86400` and
 * `RateLimit: "api.burst";r=9;t=1, "api.daily";r=999;t=87`; the legacy trio and Retry-After carry the
 * decision's own numbers (the most constraining limit; Retry-After: until every limit admits the cost).
 * Policy and limit names are restricted to [A-Za-z0-9_.-], so quoting them needs no escaping.
 */
export function rateLimitHeaders(configured: ResolvedPolicy, decision: Decision, legacy = true): Record<string, string> {
  const policy = decision.reason === 'local' && configured.local ? configured.local : configured;
  const several = policy.limits.length > 1;
  // No closure here: this runs once per request (under tsx, whose keepNames wraps every closure in a
  // __name() call, one closure cost ~1 µs per request in bench/middleware-ab.ts profiles).
  const inForce = decision.limitsInForce;
  const h: Record<string, string> = {
    'RateLimit-Policy': inForce ? inForcePolicies(policy, inForce) : several ? severalPolicies(policy) : `"${policy.name}";q=${policy.capacity};w=${policy.windowSeconds}`,
  };
  const known = decision.remaining !== undefined && decision.resetAfterMs !== undefined;
  const reset = known ? String(seconds(decision.resetAfterMs!)) : '';
  if (known) {
    const per = decision.limits;
    h.RateLimit = several && per ? severalRemaining(policy, per) : `"${policy.name}";r=${decision.remaining};t=${reset}`;
  }
  if (legacy) {
    h['X-RateLimit-Limit'] = String(decision.limit);
    if (known) {
      h['X-RateLimit-Remaining'] = String(decision.remaining);
      h['X-RateLimit-Reset'] = reset;
    }
  }
  if (!decision.allowed) h['Retry-After'] = String(Math.max(1, seconds(decision.retryAfterMs)));
  if (decision.reason) h['X-RateLimit-Reason'] = decision.reason;
  return h;
}

/** `"<policy>.<limit>"`, the name of one limit of a policy with several in the headers. */
const limitName = (policy: ResolvedPolicy, i: number) => `${policy.name}.${policy.limits[i]!.name}`;

function severalPolicies(policy: ResolvedPolicy): string {
  return policy.limits.map((l, i) => `"${limitName(policy, i)}";q=${l.capacity};w=${l.windowSeconds}`).join(', ');
}

function inForcePolicies(policy: ResolvedPolicy, numbers: readonly LimitNumbers[]): string {
  const name = (i: number) => (numbers.length > 1 ? limitName(policy, i) : policy.name);
  return numbers.map((n, i) => `"${name(i)}";q=${n.capacity};w=${windowSecondsOf(n.capacity, n.refillPerSecond)}`).join(', ');
}

function severalRemaining(policy: ResolvedPolicy, per: readonly LimitDecision[]): string {
  return per.map((d, i) => `"${limitName(policy, i)}";r=${d.remaining};t=${seconds(d.resetAfterMs)}`).join(', ');
}

/** Sets the headers on a response, copying it first if its headers are immutable (e.g. a fetched response). */
export function withHeaders(res: Response, headers: Record<string, string>): Response {
  try {
    const target = res.headers;
    for (const k in headers) target.set(k, headers[k]!);
    return res;
  } catch {
    const copy = new Response(res.body, res);
    for (const k in headers) copy.headers.set(k, headers[k]!);
    return copy;
  }
}

/**
 * The names of the limits that refused a decision of a policy with several limits (each one whose cost
 * is not there yet); undefined for a policy of one limit or a decision that was allowed.
 */
export function refusingLimits(decision: Decision): string[] | undefined {
  if (decision.allowed || decision.reason === 'store_error' || !decision.limits) return undefined;
  return decision.limits.filter((l) => l.retryAfterMs > 0).map((l) => l.name);
}
