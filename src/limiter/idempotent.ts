// The idempotent path: a step that only the store may answer, with the store's record of an operation
// id (a take with an idempotency key, and every adjustment). A recorded answer comes back `repeated`;
// an id reused for another request is an IdempotencyConflictError.
import type { Costs } from '../core/gcra.js';
import type { BucketDecision, Decision, StoreErrorDecision } from '../core/decision.js';
import type { ResolvedPolicy } from '../core/policy.js';
import { IdempotencyConflictError, StoreError, UnknownChargeError } from '../errors.js';
import type { StepArgs } from '../store.js';
import type { DecisionEvent } from './types.js';
import { STORE_ERROR_RETRY_MS, type Wiring } from './wiring.js';

export interface Idempotent {
  /**
   * An adjustment or a settlement (no request to admit: when the store fails it rejects with
   * StoreError, whatever the fail mode), or a take with an idempotency key (a lease or the deny cache
   * could answer a retry otherwise than the first time), whose decision names its charge.
   */
  once(op: DecisionEvent['op'], name: string, key: string, cost: Costs, policy: ResolvedPolicy, storageKey: string, args: StepArgs, maxWaitMs: number): Promise<Decision>;
  /** `args` with the store's op record for idempotency key `id`: the limiter's window, and what the request asks. */
  withOp(args: StepArgs, id: string, fingerprint: string): StepArgs;
}

export function createIdempotent(w: Wiring): Idempotent {
  const { store, monotonicMs, onDecision, denied, storeCall, failed, decided, emit } = w;
  return {
    withOp: (args, id, fingerprint) => ({ ...args, op: { id, ttlMs: w.idempotencyWindowMs, fingerprint } }),
    async once(op, name, key, cost, policy, storageKey, args, maxWaitMs) {
      const started = monotonicMs();
      const outcome = await storeCall(policy, storageKey, args);
      const adjust = op === 'adjust' || op === 'settle';
      if (!outcome.ok) {
        if (adjust) {
          const failedDecision: StoreErrorDecision = { allowed: false, limit: policy.capacity, retryAfterMs: STORE_ERROR_RETRY_MS, waitMs: 0, reason: 'store_error' };
          if (onDecision) emit({ policy: name, key, cost, op, decision: failedDecision, durationMs: monotonicMs() - started, error: outcome.error });
          throw new StoreError(store.name, `the ${op === 'settle' ? 'settlement' : 'adjustment'} may not have been applied: the store did not answer`, { cause: outcome.error });
        }
        const decision = failed(policy, storageKey, cost, maxWaitMs);
        if (onDecision) emit({ policy: name, key, cost, op, decision, durationMs: monotonicMs() - started, error: outcome.error });
        return decision;
      }
      const { result } = outcome;
      if (args.settle !== undefined) {
        if (result.unknownCharge) throw new UnknownChargeError(args.settle.chargeId);
        if (result.conflict) throw new IdempotencyConflictError('charge', 'was settled before with another cost; nothing was applied');
      }
      if (result.conflict) throw new IdempotencyConflictError();
      const decision = decided(policy, storageKey, cost, result, started, adjust);
      if (!adjust) decision.charge = args.op!.id;
      if (result.repeated) decision.repeated = true;
      // A settlement may refund (its cost is below what the charge took): this node's refusals are stale.
      else if (op === 'settle' || (op === 'adjust' && (typeof cost === 'number' ? cost < 0 : cost.some((c) => c < 0)))) denied?.forget(storageKey, started);
      if (onDecision) emit({ policy: name, key, cost, op, decision, durationMs: monotonicMs() - started });
      return decision;
    },
  };
}
