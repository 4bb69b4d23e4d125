// createLimiter: validates policies once, then turns take/acquire/peek/reset into one bounded store
// call each. Keeps no bucket state of its own (the optional deny cache only remembers refusals).
import { stepArgs, toDecision } from './core/gcra.js';
import type { Decision, DecisionReason } from './core/decision.js';
import { assertCost, assertKey, assertWaitMs, MAX_WAIT_MS } from './core/key.js';
import {
  resolvePolicy,
  validateFailMode,
  validateTimeoutMs,
  type FailMode,
  type PolicyConfig,
  type ResolvedPolicy,
} from './core/policy.js';
import { AcquireTimeoutError, ConfigError, StoreError, UnknownPolicyError } from './errors.js';
import type { StepResult, Store } from './store.js';

export interface CircuitBreakerOptions {
  /** Consecutive store failures that open the circuit. @default 5 */
  failureThreshold?: number;
  /** How long the circuit stays open (decisions fail fast) before one probe is let through, in ms. @default 500 */
  cooldownMs?: number;
}

export interface DecisionEvent {
  policy: string;
  key: string;
  cost: number;
  /** 'take', 'acquire' or 'peek'. */
  op: 'take' | 'acquire' | 'peek';
  decision: Decision;
  /** Wall time of the store call, in ms. */
  durationMs: number;
  /** The store error, when reason is 'store_error'. */
  error?: unknown;
}

export interface LimiterOptions<P extends string = string> {
  /** Where buckets live. */
  store: Store;
  /** Named policies; validated now, and an invalid one throws a ConfigError naming the field. */
  policies: Record<P, PolicyConfig>;
  /** Prefix of every store key: `{prefix}{policy}:{key}`. @default 'el:' */
  prefix?: string;
  /** Bound on one store call, in ms, unless a policy sets its own. @default 1000 */
  timeoutMs?: number;
  /** Outcome when the store fails, unless a policy sets its own. @default 'deny' */
  onStoreError?: FailMode;
  /** Hook called after every decision, e.g. for a structured log line. Off by default. Errors it throws are ignored. */
  onDecision?: (event: DecisionEvent) => void;
  /** Fail fast while the store is down. `false` disables it. @default { failureThreshold: 5, cooldownMs: 500 } */
  circuitBreaker?: CircuitBreakerOptions | false;
  /**
   * Remember denials on this node and answer them locally until their retryAfterMs has passed, without a
   * store call. Measured on this node's monotonic clock (relative time), so clock skew cannot affect it, and
   * it can only deny what the store would deny. @default false
   */
  denyCache?: boolean | { maxKeys?: number };
  /**
   * Most store calls that may be outstanding at once, counting calls that timed out but whose store
   * promise has not settled yet (a paused server). Beyond it, decisions fail at once per onStoreError,
   * so a stalled store cannot pile up unbounded promises or sockets. @default 1024
   */
  maxPendingStoreCalls?: number;
}

export interface TakeOptions {
  /** Tokens to take: an integer from 1 to the policy's capacity. @default 1 */
  cost?: number;
  /** Reserve if the tokens will exist within this many ms; the decision's waitMs says how long to wait. @default 0 */
  maxWaitMs?: number;
}

export interface AcquireOptions {
  /** @default 1 */
  cost?: number;
  /** The longest acceptable wait, in ms. @default 30000 */
  timeoutMs?: number;
  /** Aborts the wait. A reservation already made is then forfeited (its tokens stay taken). */
  signal?: AbortSignal;
}

export interface Limiter<P extends string = string> {
  /** One decision; consumes tokens only when allowed. Rejects with InvalidInputError/UnknownPolicyError on bad input. */
  take(policy: P, key: string, options?: TakeOptions): Promise<Decision>;
  /** Reserves a slot in one store call, then sleeps until it is due. Rejects with AcquireTimeoutError (nothing consumed) if it would wait longer than timeoutMs. */
  acquire(policy: P, key: string, options?: AcquireOptions): Promise<Decision>;
  /** The bucket's state now; consumes nothing. */
  peek(policy: P, key: string): Promise<Decision>;
  /** Refills the bucket. */
  reset(policy: P, key: string): Promise<void>;
  /** The validated policy, or undefined. */
  policy(name: string): ResolvedPolicy | undefined;
  readonly policies: ReadonlyMap<string, ResolvedPolicy>;
  readonly store: Store;
  /** Store calls outstanding now (including timed-out ones not yet settled), and the breaker state. */
  stats(): { pendingStoreCalls: number; circuit: 'closed' | 'open' | 'half-open' };
}

const DEFAULT_ACQUIRE_TIMEOUT_MS = 30_000;
/** Retry-After suggested for a refusal caused by a store failure. */
const STORE_ERROR_RETRY_MS = 1000;

function withTimeout<T>(promise: Promise<T>, ms: number, store: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StoreError(store, `timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

const monotonicMs = () => performance.now();
/** The onDecision `error` of a decision skipped because the circuit breaker is open. */
const CIRCUIT_OPEN = new StoreError('circuit', 'circuit breaker open: the store failed repeatedly; failing fast until the next probe');

export function createLimiter<P extends string>(options: LimiterOptions<P>): Limiter<P> {
  if (!options || typeof options !== 'object') throw new ConfigError('options', 'must be an object');
  const { store } = options;
  if (!store || typeof store.step !== 'function') throw new ConfigError('store', 'must be a Store (memoryStore(), redisStore(), mongoStore())');
  const prefix = options.prefix ?? 'el:';
  if (typeof prefix !== 'string' || prefix.length > 64) throw new ConfigError('prefix', 'must be a string of at most 64 characters');
  const timeoutMs = options.timeoutMs === undefined ? 1000 : validateTimeoutMs('timeoutMs', options.timeoutMs);
  const onStoreError = options.onStoreError === undefined ? 'deny' : validateFailMode('onStoreError', options.onStoreError);
  if (!options.policies || typeof options.policies !== 'object') throw new ConfigError('policies', 'must be an object of named policies');
  const policies = new Map<string, ResolvedPolicy>();
  for (const [name, config] of Object.entries(options.policies)) {
    policies.set(name, resolvePolicy(name, config, { onStoreError, timeoutMs }));
  }
  if (policies.size === 0) throw new ConfigError('policies', 'must define at least one policy');
  const onDecision = options.onDecision;

  // Circuit breaker: consecutive failures open it; after the cool-down one probe goes through.
  const breakerOpts = options.circuitBreaker === false ? undefined : { failureThreshold: 5, cooldownMs: 500, ...options.circuitBreaker };
  if (breakerOpts) {
    if (!Number.isInteger(breakerOpts.failureThreshold) || breakerOpts.failureThreshold < 1) {
      throw new ConfigError('circuitBreaker.failureThreshold', `must be a positive integer, got ${String(breakerOpts.failureThreshold)}`);
    }
    if (!Number.isFinite(breakerOpts.cooldownMs) || breakerOpts.cooldownMs < 0) {
      throw new ConfigError('circuitBreaker.cooldownMs', `must be a non-negative number, got ${String(breakerOpts.cooldownMs)}`);
    }
  }
  let failures = 0;
  let openUntil = 0;
  let probing = false;
  const maxPending = options.maxPendingStoreCalls ?? 1024;
  if (!Number.isInteger(maxPending) || maxPending < 1) {
    throw new ConfigError('maxPendingStoreCalls', `must be a positive integer, got ${String(maxPending)}`);
  }
  let pending = 0;
  const settle = () => {
    pending--;
  };

  // Deny cache: storage key -> the refusal's due time on this node's monotonic clock, and its cost.
  const denyCacheMax = options.denyCache ? (typeof options.denyCache === 'object' ? options.denyCache.maxKeys ?? 10_000 : 10_000) : 0;
  const denied = new Map<string, { untilMs: number; cost: number; decision: Decision }>();

  function getPolicy(name: string): ResolvedPolicy {
    const p = typeof name === 'string' ? policies.get(name) : undefined;
    if (!p) throw new UnknownPolicyError(String(name));
    return p;
  }

  function failed(policy: ResolvedPolicy, reason: DecisionReason): Decision {
    const allowed = policy.onStoreError === 'allow';
    return { allowed, limit: policy.capacity, remaining: 0, retryAfterMs: allowed ? 0 : STORE_ERROR_RETRY_MS, resetAfterMs: 0, waitMs: 0, reason };
  }

  async function call(policy: ResolvedPolicy, storageKey: string, cost: number, maxWaitMs: number): Promise<{ decision: Decision; error?: unknown }> {
    if (store.inProcess) {
      // No I/O, so no timer, breaker or pending count: they would only cost time on the hot path.
      try {
        return { decision: toDecision(policy, cost, await store.step(storageKey, stepArgs(policy, cost, maxWaitMs))) };
      } catch (error) {
        return { decision: failed(policy, 'store_error'), error };
      }
    }
    let isProbe = false;
    if (breakerOpts && failures >= breakerOpts.failureThreshold) {
      if (monotonicMs() < openUntil || probing) return { decision: failed(policy, 'store_error'), error: CIRCUIT_OPEN };
      probing = isProbe = true;
    }
    if (pending >= maxPending) {
      if (isProbe) probing = false;
      return { decision: failed(policy, 'store_error'), error: new StoreError(store.name, `${pending} store calls are already pending`) };
    }
    try {
      let call: Promise<StepResult>;
      try {
        call = store.step(storageKey, stepArgs(policy, cost, maxWaitMs));
      } catch (err) {
        call = Promise.reject(err);
      }
      pending++;
      call.then(settle, settle);
      const result = await withTimeout(call, policy.timeoutMs, store.name);
      failures = 0;
      return { decision: toDecision(policy, cost, result) };
    } catch (error) {
      failures++;
      if (breakerOpts && failures >= breakerOpts.failureThreshold) openUntil = monotonicMs() + breakerOpts.cooldownMs;
      return { decision: failed(policy, 'store_error'), error };
    } finally {
      // Only the probe ends the probe: a call that started before the circuit opened may settle meanwhile.
      if (isProbe) probing = false;
    }
  }

  function emit(event: DecisionEvent): void {
    try {
      onDecision!(event);
    } catch {
      // A logging hook must never change a decision.
    }
  }

  /** Validates, then decides; a synchronous store with no hook or cache answers without any await. */
  function decide(op: 'take' | 'acquire', name: string, key: string, cost: number, maxWaitMs: number): Promise<Decision> {
    let policy: ResolvedPolicy;
    try {
      policy = getPolicy(name);
      assertKey(key);
      assertCost(cost, policy.capacity);
      assertWaitMs(op === 'take' ? 'maxWaitMs' : 'timeoutMs', maxWaitMs);
    } catch (err) {
      return Promise.reject(err);
    }
    const storageKey = `${prefix}${policy.name}:${key}`;
    if (store.stepSync && !onDecision && denyCacheMax === 0) {
      try {
        return Promise.resolve(toDecision(policy, cost, store.stepSync(storageKey, stepArgs(policy, cost, maxWaitMs))));
      } catch {
        return Promise.resolve(failed(policy, 'store_error'));
      }
    }
    return decideAsync(op, name, key, cost, maxWaitMs, policy, storageKey);
  }

  async function decideAsync(op: 'take' | 'acquire', name: string, key: string, cost: number, maxWaitMs: number, policy: ResolvedPolicy, storageKey: string): Promise<Decision> {
    const started = onDecision || denyCacheMax > 0 ? monotonicMs() : 0;
    if (denyCacheMax > 0) {
      const hit = denied.get(storageKey);
      if (hit) {
        const leftMs = hit.untilMs - started;
        // Only a request at least as large, that will not wait as long, is certainly refused too.
        if (leftMs > 0 && cost >= hit.cost && maxWaitMs < leftMs) {
          const decision: Decision = { ...hit.decision, retryAfterMs: Math.ceil(leftMs), reason: 'deny_cache' };
          if (onDecision) emit({ policy: name, key, cost, op, decision, durationMs: 0 });
          return decision;
        }
        if (leftMs <= 0) denied.delete(storageKey);
      }
    }
    const { decision, error } = await call(policy, storageKey, cost, maxWaitMs);
    if (denyCacheMax > 0 && !decision.allowed && decision.reason === undefined) {
      if (denied.size >= denyCacheMax) denied.delete(denied.keys().next().value!);
      denied.set(storageKey, { untilMs: started + decision.retryAfterMs, cost, decision });
    }
    if (onDecision) emit({ policy: name, key, cost, op, decision, durationMs: monotonicMs() - started, ...(error === undefined ? {} : { error }) });
    return decision;
  }

  return {
    policies,
    store,
    policy: (name) => policies.get(name),
    stats: () => ({
      pendingStoreCalls: pending,
      circuit: !breakerOpts || failures < breakerOpts.failureThreshold ? 'closed' : monotonicMs() < openUntil ? 'open' : 'half-open',
    }),
    take(name, key, opts = {}) {
      return decide('take', name, key, opts.cost ?? 1, opts.maxWaitMs ?? 0);
    },
    async acquire(name, key, opts = {}) {
      opts.signal?.throwIfAborted();
      const wait = opts.timeoutMs ?? DEFAULT_ACQUIRE_TIMEOUT_MS;
      const decision = await decide('acquire', name, key, opts.cost ?? 1, wait);
      if (!decision.allowed) {
        if (decision.reason === 'store_error') {
          throw new StoreError(store.name, 'no permit: the store is unavailable and the policy fails closed');
        }
        throw new AcquireTimeoutError(`no permit within ${wait} ms; tokens exist in ${decision.retryAfterMs} ms`, decision.retryAfterMs);
      }
      if (decision.waitMs > 0) await sleep(decision.waitMs, opts.signal);
      return decision;
    },
    async peek(name, key) {
      const policy = getPolicy(name);
      assertKey(key);
      const started = monotonicMs();
      const { decision, error } = await call(policy, `${prefix}${policy.name}:${key}`, 0, 0);
      if (onDecision) emit({ policy: name, key, cost: 0, op: 'peek', decision, durationMs: monotonicMs() - started, ...(error === undefined ? {} : { error }) });
      return decision;
    },
    async reset(name, key) {
      const policy = getPolicy(name);
      assertKey(key);
      const storageKey = `${prefix}${policy.name}:${key}`;
      denied.delete(storageKey);
      await withTimeout(store.reset(storageKey), policy.timeoutMs, store.name);
    },
  };
}

export { MAX_WAIT_MS };
