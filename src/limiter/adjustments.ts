// Adjustments: settling a cost after the fact (settle, bounded by what a charge took; adjust, free-form,
// the administrative path; each one atomic store step through the idempotent path) and refilling a bucket (reset, one store call bounded like a decision, which also clears this
// node's deny cache entry, lease and local bucket for the key).
import { adjustArgs, settleArgs, SETTLE_OP } from '../core/gcra.js';
import type { Decision } from '../core/decision.js';
import { assertIdempotencyKey, assertKey, resolveAdjustment, resolveSettlement, type Cost } from '../core/key.js';
import type { Idempotent } from './idempotent.js';
import type { AdjustOptions, AdminOptions, AuditEvent, SettleChargeOptions } from './types.js';
import { withTimeout, type Wiring } from './wiring.js';
import { seenOf } from './policy-wide.js';
import type { PolicyEntry } from './entry.js';

export interface Adjustments {
  adjust(name: string, key: string, cost: Cost, options?: AdjustOptions): Promise<Decision>;
  settle(name: string, key: string, options: SettleChargeOptions): Promise<Decision>;
  reset(name: string, key: string, options?: AdminOptions): Promise<void>;
}

/** `peek`: reads a bucket without onDecision hearing of it, for an administrative action's `before`. */
export function createAdjustments(w: Wiring, idempotent: Idempotent, peek: (name: string, key: string) => Promise<Decision>): Adjustments {
  const { store, getEntry, monotonicMs, audit } = w;
  /** This node's reading of the policy-wide change brought up to date, as for a take (an adjustment carries it too). */
  function freshView(entry: PolicyEntry): Promise<void> | undefined {
    const wide = w.policyWide;
    return wide === undefined || wide.fresh(entry) ? undefined : wide.refresh(entry, monotonicMs());
  }

  return {
    async adjust(name, key, cost, opts = {}) {
      const entry = getEntry(name);
      const { policy, keyPrefix } = entry;
      assertKey(key);
      const costs = resolveAdjustment(policy, cost);
      if (opts.idempotencyKey !== undefined) assertIdempotencyKey(opts.idempotencyKey);
      await freshView(entry);
      const args = adjustArgs(policy, costs, entry.change, seenOf(entry), entry.holdMs);
      const withOp = opts.idempotencyKey === undefined ? args : idempotent.withOp(args, opts.idempotencyKey, `adjust|${JSON.stringify(costs)}`);
      return audited('adjust', name, key, opts, () => idempotent.once('adjust', name, key, costs, policy, keyPrefix + key, withOp, 0), (d) => ({
        cost,
        remaining: d.remaining,
        repeated: d.repeated,
      }));
    },
    async settle(name, key, opts) {
      const entry = getEntry(name);
      const { policy, keyPrefix } = entry;
      assertKey(key);
      const { charge, cost } = opts ?? ({} as Partial<SettleChargeOptions>);
      assertIdempotencyKey(charge, 'charge');
      const costs = resolveSettlement(policy, cost);
      await freshView(entry);
      // Its own operation id, derived from the charge's: a retry, or a second server settling the same
      // charge, gets the first answer; another cost is a conflict.
      const args = idempotent.withOp(settleArgs(policy, costs, charge, entry.change, seenOf(entry), entry.holdMs), SETTLE_OP + charge, `settle|${JSON.stringify(costs)}`);
      return idempotent.once('settle', name, key, costs, policy, keyPrefix + key, args, 0);
    },
    async reset(name, key, opts = {}) {
      const { policy, keyPrefix } = getEntry(name);
      assertKey(key);
      const storageKey = keyPrefix + key;
      w.denied?.forget(storageKey, monotonicMs());
      w.leases?.forget(storageKey);
      await audited('reset', name, key, opts, () => withTimeout(store.reset(storageKey), policy.timeoutMs, store.name), () => ({ remaining: policy.capacity }));
      // Only a reset the store applied refills the local bucket too: a failed one leaves it as it is.
      w.fallback?.forget(storageKey);
    },
  };

  /** Runs an administrative action and tells onAudit of it once it is answered: what it left, or its error. */
  async function audited<T>(action: AuditEvent['action'], policy: string, key: string, opts: AdminOptions, run: () => Promise<T>, after: (result: T) => unknown): Promise<T> {
    // Fields left undefined (no actor, a first adjustment's `repeated`) are absent from a JSON line.
    const event: AuditEvent = { action, policy, key, actor: opts.actor, atMs: 0 };
    // `before` is a peek just before the action, not read in its store step: another caller's take in
    // between shows in neither. A store that does not answer it leaves `before` absent. No hook, no
    // peek: an action costs one store call, as it did before the hook.
    if (w.auditing) {
      const read = await peek(policy, key);
      if (read.reason !== 'store_error') event.before = { remaining: read.remaining };
    }
    try {
      const result = await run();
      event.after = after(result);
      return result;
    } catch (error) {
      event.error = error;
      throw error;
    } finally {
      event.atMs = Date.now();
      audit(event);
    }
  }
}
