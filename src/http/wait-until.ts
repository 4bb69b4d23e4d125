// The runtime's waitUntil for background work (lease refills and refunds, a policy-wide reading started
// in the background), when the request has one.
import type { Context } from 'hono';
import type { WaitUntil } from '../limiter/lease.js';

/** `c.executionCtx.waitUntil` on Workers; undefined on Node and Lambda (where Hono's getter throws). */
export function waitUntilOf(c: Context): WaitUntil | undefined {
  try {
    const ctx = c.executionCtx;
    return (promise) => ctx.waitUntil(promise);
  } catch {
    return undefined;
  }
}

/**
 * A decision's waitUntil (TakeOptions.waitUntil): a leased policy's is the runtime's, found now (its
 * grants and refunds need to know whether there is one); any other policy's looks for it only when
 * background work starts (a policy-wide reading, about once per policyRefreshMs), so a request on Node
 * or Lambda pays no failed lookup.
 */
export function decisionWaitUntil(c: Context, leased: boolean): WaitUntil | undefined {
  if (leased) return waitUntilOf(c);
  return (promise) => waitUntilOf(c)?.(promise);
}
