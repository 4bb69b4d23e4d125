// The runtime's waitUntil for background work (lease refills and refunds), when the request has one.
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
