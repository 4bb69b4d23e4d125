// The limiter's parts, built once from its options: the validated policies (./options.ts), the guarded
// store call (./store-call.ts; an in-process store is called directly), the deny cache, the token leases
// and the local fallback, the policy-wide changes this node reads and the blocks it knows of, with the
// answers every path shares: a store failure's decision, a step result's decision, and the hooks.
import { policyView, type Costs } from '../core/gcra.js';
import type { BucketDecision, Decision, StoreErrorDecision } from '../core/decision.js';
import type { ResolvedPolicy } from '../core/policy.js';
import { ConfigError, StoreError, UnknownPolicyError } from '../errors.js';
import type { StepArgs, StepOptions, StepResult, Store } from '../store.js';
import { createBreaker } from './breaker.js';
import { createDenyCache, type DenyCache } from './deny-cache.js';
import { createLeases, type Leases } from './lease.js';
import { createLocalFallback, type LocalFallback } from './local-fallback.js';
import type { PolicyEntry } from './entry.js';
import { blockedDecision, blockLeftMs, createInForce, type InForce } from './in-force.js';
import { createKnownBlocks, type KnownBlocks } from './known-blocks.js';
import { createPolicyWide, seenOf, type PolicyWide } from './policy-wide.js';
import { resolveSettings } from './options.js';
import { createStoreCaller, type CallOutcome, type StoreCaller } from './store-call.js';
import type { AuditEvent, DecisionEvent, LimiterOptions } from './types.js';

/** Retry-After suggested for a refusal caused by a store failure. */
export const STORE_ERROR_RETRY_MS = 1000;
/** Most keys with a local fallback bucket on one node (the memory store's default bound). */
const LOCAL_MAX_KEYS = 100_000;

/** What the decision, idempotent and adjustment paths share. */
export interface Wiring {
  store: Store;
  policies: Map<string, ResolvedPolicy>;
  entries: Map<string, PolicyEntry>;
  idempotencyWindowMs: number;
  monotonicMs: () => number;
  /** The onDecision hook, if any: a path calls emit() only when it is set (no event built otherwise). */
  onDecision: ((event: DecisionEvent) => void) | undefined;
  denied: DenyCache | undefined;
  leases: Leases | undefined;
  fallback: LocalFallback | undefined;
  /** Policy-wide changes as this node reads them; undefined for a store that keeps no runtime limits. */
  policyWide: PolicyWide | undefined;
  /** Blocks this node knows of: refused while they last, even when the store does not answer. */
  blocks: KnownBlocks;
  /** Decisions under the numbers in force (a runtime change's, or a block). */
  inForce: InForce;
  caller: StoreCaller;
  /** The policy's entry; an UnknownPolicyError for a name the limiter has no policy for. */
  getEntry(name: string): PolicyEntry;
  /**
   * One store step, bounded (timeout, breaker, pending cap) unless the store is in-process. A
   * `background` step (a lease refund) is outside the pending cap; the leases bound their own.
   */
  storeCall(policy: ResolvedPolicy, storageKey: string, args: StepArgs, background?: boolean): Promise<CallOutcome>;
  /** The decision when the store did not decide: a block this node knows of, else the policy's fail mode. */
  failed(policy: ResolvedPolicy, storageKey: string, cost: Costs, maxWaitMs: number): Decision;
  /**
   * The decision of a step the store answered with `result` (a call started at monotonic startedMs), under
   * the numbers in force; notes or forgets the key's block on this node.
   */
  decided(policy: ResolvedPolicy, storageKey: string, cost: Costs, result: StepResult, startedMs?: number, peek?: boolean): BucketDecision;
  /** Calls the onDecision hook; what it throws is ignored. */
  emit(event: DecisionEvent): void;
  /** Calls the onAudit hook, if any; what it throws is ignored. */
  audit(event: AuditEvent): void;
  /** Whether an onAudit hook is set: an administrative action reads its `before` only then. */
  readonly auditing: boolean;
}

export function wire(options: LimiterOptions): Wiring {
  if (!options || typeof options !== 'object') throw new ConfigError('options', 'must be an object');
  const { store } = options;
  if (!store || typeof store.step !== 'function') throw new ConfigError('store', 'must be a Store (memoryStore(), redisStore(), mongoStore())');
  const settings = resolveSettings(options);
  const { policies, entries, idempotencyWindowMs, maxPending, denyCacheMax, leaseMaxKeys } = settings;
  const onDecision = options.onDecision;
  const monotonicMs = options.monotonicMs ?? (() => performance.now());
  const caller = createStoreCaller({ store, breaker: createBreaker(options.circuitBreaker, monotonicMs), maxPending, monotonicMs, onStatus: options.onStoreStatus });
  const denied = denyCacheMax > 0 ? createDenyCache(denyCacheMax, settings.policyRefreshMs) : undefined;
  const leases = [...policies.values()].some((p) => p.lease)
    ? createLeases({
        // A grant or refund carries the policy-wide change this node sees, as every step does.
        call: (storageKey, args, policy, background) => {
          const entry = entries.get(policy.name);
          return storeCall(policy, storageKey, entry === undefined ? args : { ...args, ...policyView(entry.change, seenOf(entry), entry.holdMs) }, background);
        },
        monotonicMs,
        maxKeys: leaseMaxKeys,
        // A refund makes tokens this node may have refused from its deny cache: the store decides again.
        onRefund: denied ? (storageKey) => denied.forget(storageKey, monotonicMs()) : undefined,
      })
    : undefined;
  const fallback = [...policies.values()].some((p) => p.local) ? createLocalFallback({ maxKeys: LOCAL_MAX_KEYS, monotonicMs, policies: policies.values() }) : undefined;
  const blocks = createKnownBlocks(LOCAL_MAX_KEYS);
  const inForce = createInForce();
  const policyWide =
    typeof store.override === 'function'
      ? createPolicyWide({
          store,
          refreshMs: settings.policyRefreshMs,
          monotonicMs,
          read: (entry) => withTimeout((o) => store.override!(entry.policyKey, { base: entry.base }, o), entry.policy.timeoutMs, store.name),
          // Leases and cached refusals of the policy were decided under the change before: they go.
          onChange: (entry) => {
            leases?.releaseAll(entry.keyPrefix);
            denied?.clear(monotonicMs());
          },
        })
      : undefined;

  function getEntry(name: string): PolicyEntry {
    const e = typeof name === 'string' ? entries.get(name) : undefined;
    if (!e) throw new UnknownPolicyError(String(name));
    return e;
  }

  /** 'local' decides from this node's bucket for the key; 'allow' and 'deny' claim no bucket numbers. */
  function failed(policy: ResolvedPolicy, storageKey: string, cost: Costs, maxWaitMs: number): Decision {
    if (blocks.size > 0) {
      const left = blocks.leftMs(storageKey, monotonicMs());
      if (left > 0) return blockedDecision(policy, left);
    }
    if (policy.local) return fallback!.decide(policy, storageKey, cost, maxWaitMs);
    const allowed = policy.onStoreError === 'allow';
    return { allowed, limit: policy.capacity, retryAfterMs: allowed ? 0 : STORE_ERROR_RETRY_MS, waitMs: 0, reason: 'store_error' } satisfies StoreErrorDecision;
  }

  function decided(policy: ResolvedPolicy, storageKey: string, cost: Costs, result: StepResult, startedMs?: number, peek = false): BucketDecision {
    // A repeat (an idempotency key's recorded answer) tells what the key was then, not now: the blocks
    // this node knows stay as they are (review 5, L3).
    if (!result.repeated) {
      if (result.blockedUntilUs !== undefined) blocks.note(storageKey, (startedMs ?? monotonicMs()) + blockLeftMs(result));
      else if (blocks.size > 0) blocks.clear(storageKey);
    }
    return inForce.decide(policy, cost, result, peek);
  }

  function storeCall(policy: ResolvedPolicy, storageKey: string, args: StepArgs, background = false): Promise<CallOutcome> {
    if (store.inProcess) return inProcessCall(storageKey, args);
    const outcome = caller.call(storageKey, args, policy.timeoutMs, background);
    return fallback ? outcome.then(answeredAgain) : outcome;
  }

  /** No I/O, so no timer, breaker or pending count: they would only cost time on the hot path. */
  async function inProcessCall(storageKey: string, args: StepArgs): Promise<CallOutcome> {
    try {
      return { ok: true, result: await store.step(storageKey, args) };
    } catch (error) {
      return { ok: false, error };
    }
  }

  /** The store answers again: this decision is its own (the local buckets go once it keeps answering). */
  function answeredAgain(outcome: CallOutcome): CallOutcome {
    if (outcome.ok) fallback!.storeAnswered();
    return outcome;
  }

  /** Calls a hook; what it throws is ignored: a logging hook must never change a decision or an action. */
  function quietly<E>(hook: ((event: E) => void) | undefined, event: E): void {
    try {
      hook?.(event);
    } catch {
      // Ignored, as documented.
    }
  }
  const emit = (event: DecisionEvent) => quietly(onDecision, event);
  const audit = (event: AuditEvent) => quietly(options.onAudit, event);

  return { store, policies, entries, idempotencyWindowMs, monotonicMs, onDecision, denied, leases, fallback, policyWide, blocks, inForce, caller, getEntry, storeCall, failed, decided, emit, audit, auditing: options.onAudit !== undefined };
}

/**
 * A bounded store call that is not a step (a reset, a runtime change, a policy-wide reading): it rejects
 * with StoreError after ms. Given a function, the call gets StepOptions as a step does: a signal aborted
 * at the timeout (made only if the store reads it), so a store cancels the I/O the limiter gave up on.
 */
export async function withTimeout<T>(call: Promise<T> | ((options: StepOptions) => Promise<T>), ms: number, store: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let controller: AbortController | undefined;
  let reason: StoreError | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reason = new StoreError(store, `timed out after ${ms} ms`);
      controller?.abort(reason);
      reject(reason);
    }, ms);
  });
  let promise: Promise<T>;
  if (typeof call === 'function') {
    const options: StepOptions = {
      timeoutMs: ms,
      get signal(): AbortSignal {
        if (!controller) {
          controller = new AbortController();
          if (reason) controller.abort(reason);
        }
        return controller.signal;
      },
    };
    try {
      promise = Promise.resolve(call(options));
    } catch (error) {
      promise = Promise.reject(error);
    }
  } else promise = call;
  promise.catch(() => {});
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
