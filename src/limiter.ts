// createLimiter: the limiter's public face, one page. Its parts live in ./limiter/: the wiring (options,
// guarded store call, deny cache, leases, local fallback), the decision path, the idempotent path, the
// adjustments and the runtime limits. It keeps no bucket state of its own; the types are defined in ./limiter/types.ts.
import { MAX_WAIT_MS } from './core/key.js';
import { createAdjustments } from './limiter/adjustments.js';
import { createDecisions } from './limiter/decisions.js';
import { createIdempotent } from './limiter/idempotent.js';
import { createRuntimeLimits } from './limiter/runtime-limits.js';
import type { Limiter, LimiterOptions } from './limiter/types.js';
import { wire } from './limiter/wiring.js';

export type {
  AcquireOptions,
  AdjustOptions,
  AdminOptions,
  AuditAction,
  AuditEvent,
  BlockOptions,
  CircuitBreakerOptions,
  CircuitState,
  DecisionEvent,
  KeyLimits,
  LimitNumbers,
  LimitsInput,
  Limiter,
  LimiterOptions,
  LimitsState,
  LimiterStats,
  SettleChargeOptions,
  PolicyLimits,
  SetLimitsOptions,
  StoreStatusEvent,
  TakeOptions,
  WaitUntil,
} from './limiter/types.js';

/**
 * A limiter over `options.store` with `options.policies`, validated now: an invalid option throws a
 * ConfigError naming the field. take/acquire/peek/adjust/reset, and each runtime change of limits
 * (setLimits, block, setPolicyLimits...), are each one bounded store call.
 */
export function createLimiter<P extends string>(options: LimiterOptions<P>): Limiter<P> {
  const w = wire(options);
  const idempotent = createIdempotent(w);
  const { take, acquire, peek, peekQuietly, drain } = createDecisions(w, idempotent);
  const { adjust, settle, reset } = createAdjustments(w, idempotent, peekQuietly);
  const runtime = createRuntimeLimits(w);
  const { store, policies, caller, leases, fallback } = w;
  return {
    policies,
    store,
    policy: (name) => policies.get(name),
    stats: () => ({
      pendingStoreCalls: caller.pending(),
      maxPendingStoreCalls: caller.maxPending,
      circuit: caller.circuit(),
      leases: leases?.stats() ?? { keys: 0, tokens: 0 },
      localKeys: fallback?.size() ?? 0,
    }),
    close: async () => {
      await drain();
      await leases?.close();
      await store.close?.();
    },
    take,
    acquire,
    peek,
    adjust,
    settle,
    reset,
    setLimits: runtime.setLimits,
    getLimits: runtime.getLimits,
    clearLimits: runtime.clearLimits,
    block: runtime.block,
    unblock: runtime.unblock,
    setPolicyLimits: runtime.setPolicyLimits,
    getPolicyLimits: runtime.getPolicyLimits,
    clearPolicyLimits: runtime.clearPolicyLimits,
  };
}

export { MAX_WAIT_MS };
