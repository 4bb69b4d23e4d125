// createLimiter: validates policies once (./limiter/options.ts), then turns take/acquire/peek/adjust/reset
// into one bounded store call each. Keeps no bucket state of its own (the optional deny cache only remembers refusals).
// The guarded store call, the circuit breaker and the deny cache live in ./limiter/.
import { adjustArgs, oneLimitDecision, stepArgs, toDecision, toPeekDecision, type Costs, type OpArgs } from './core/gcra.js';
import type { BucketDecision, Decision, StoreErrorDecision } from './core/decision.js';
import { assertIdempotencyKey, assertKey, assertWaitMs, isShortKey, MAX_WAIT_MS, resolveAdjustment, resolveCost, type Cost } from './core/key.js';
import type { FailMode, PolicyConfig, ResolvedPolicy } from './core/policy.js';
import { AcquireTimeoutError, ConfigError, IdempotencyConflictError, StoreError, UnknownPolicyError } from './errors.js';
import type { StepArgs, Store } from './store.js';
import { createBreaker, type CircuitBreakerOptions, type CircuitState } from './limiter/breaker.js';
import { createDenyCache } from './limiter/deny-cache.js';
import { createLeases, type WaitUntil } from './limiter/lease.js';
import { createLocalFallback } from './limiter/local-fallback.js';
import { resolveSettings, type PolicyEntry } from './limiter/options.js';
import { createStoreCaller, type CallOutcome, type StoreStatusEvent } from './limiter/store-call.js';

export type { CircuitBreakerOptions, CircuitState, StoreStatusEvent, WaitUntil };

export interface DecisionEvent {
  policy: string;
  key: string;
  /** Tokens charged: one number for every limit, or per limit in the policy's order (0 for a peek). */
  cost: Costs;
  /** 'take', 'acquire', 'peek' or 'adjust'. */
  op: 'take' | 'acquire' | 'peek' | 'adjust';
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
  /**
   * How many nodes share the store. A policy with onStoreError 'local' and no `local` block falls back to
   * its own numbers divided by this, so that during an outage the nodes together admit about what the
   * policy does (at most nodes × (local capacity + local rate × outage length)). An integer from 1 to
   * 100000. @default 1
   */
  expectedNodes?: number;
  /** Hook called after every decision, e.g. for a structured log line. Off by default. Errors it throws are ignored. */
  onDecision?: (event: DecisionEvent) => void;
  /** Fail fast while the store is down. `false` disables it. @default { failureThreshold: 5, cooldownMs: 500 } */
  circuitBreaker?: CircuitBreakerOptions | false;
  /**
   * Remember denials on this node and answer them locally until their retryAfterMs has passed, without a
   * store call; `remaining` and `resetAfterMs` of such an answer are recomputed from the time elapsed.
   * Measured on this node's monotonic clock (relative time), so clock skew cannot affect it, and it can
   * only deny what the store would deny.
   *
   * Trade-off: a `reset` (or any refill) made through another node is not seen on this node until the
   * cached refusal's retryAfterMs has passed. `reset` through this limiter clears its own entry.
   * @default false
   */
  denyCache?: boolean | { maxKeys?: number };
  /**
   * Most store calls in flight at once. A call stops counting when it settles or when its timeoutMs
   * passes (its I/O is then aborted through the signal passed to `Store.step`), so a store whose calls
   * never settle cannot lock the limiter. Beyond it, decisions fail at once per onStoreError.
   * @default 1024
   */
  maxPendingStoreCalls?: number;
  /**
   * Called once when decisions start failing because of the store (timeouts, errors, open circuit) and
   * once when the store decides again: one log line per outage, not one per request. Errors it throws
   * are ignored.
   */
  onStoreStatus?: (event: StoreStatusEvent) => void;
  /**
   * Bounds the token leases of policies that opt in (PolicyConfig.lease): at most this many keys hold a
   * lease on this node; beyond it the oldest lease gives its tokens back. @default { maxKeys: 10000 }
   */
  leases?: { maxKeys?: number };
  /**
   * How long the store remembers an idempotency key (TakeOptions.idempotencyKey, an adjust's), in ms of
   * its clock: a retry within it gets the first answer and is not charged again. From 1000 to 86400000.
   * @default 300000 (5 minutes)
   */
  idempotencyWindowMs?: number;
  /** Monotonic clock in ms for timeouts, the breaker, the deny cache and leases. Tests pass a fake one. @default performance.now */
  monotonicMs?: () => number;
}

export interface TakeOptions {
  /**
   * Tokens to take: an integer from 1 to the policy's capacity (every limit of a policy with several
   * pays it), or per limit, `{ requests: 1, tokens: 1200 }` (a limit not named pays 0). @default 1
   */
  cost?: Cost;
  /** Reserve if the tokens will exist within this many ms; the decision's waitMs says how long to wait. @default 0 */
  maxWaitMs?: number;
  /**
   * Applies this take at most once per key within the limiter's idempotencyWindowMs: a take with the
   * same key again (a client's retry) gets the first answer, `repeated: true`, and charges nothing; the
   * same key with another cost or wait is an IdempotencyConflictError. The store records it in the same
   * atomic step (such a take always goes to the store: no lease or deny cache answers it). 1 to 256
   * printable ASCII characters (space to `~`), as the Idempotency-Key header carries them. Off by default.
   */
  idempotencyKey?: string;
  /**
   * Where background store calls of token leases (refills, refunds) are handed to the runtime: on
   * Workers pass `ctx.waitUntil.bind(ctx)` (the middleware and permit endpoint do), so they finish after
   * the response; a grant whose expiry will give tokens back also keeps its request until then. Not
   * needed on Node (an unref'd timer gives aged grants back).
   */
  waitUntil?: WaitUntil;
}

export interface AcquireOptions {
  /** As TakeOptions.cost. @default 1 */
  cost?: Cost;
  /** As TakeOptions.idempotencyKey: a retried acquire gets the first reservation, not a second. */
  idempotencyKey?: string;
  /** The longest acceptable wait, in ms. @default 30000 */
  timeoutMs?: number;
  /** Aborts the wait. A reservation already made is then forfeited (its tokens stay taken). */
  signal?: AbortSignal;
  /** See TakeOptions.waitUntil. */
  waitUntil?: WaitUntil;
}

export interface Limiter<P extends string = string> {
  /** One decision; consumes tokens only when allowed. Rejects with InvalidInputError/UnknownPolicyError on bad input. */
  take(policy: P, key: string, options?: TakeOptions): Promise<Decision>;
  /** Reserves a slot in one store call, then sleeps until it is due. Rejects with AcquireTimeoutError (nothing consumed) if it would wait longer than timeoutMs. */
  acquire(policy: P, key: string, options?: AcquireOptions): Promise<Decision>;
  /** The bucket's state now; consumes nothing. */
  peek(policy: P, key: string): Promise<Decision>;
  /**
   * Settles a cost after the fact, in one atomic store call on the store's clock: below 0 a refund
   * (never fuller than full), above 0 a charge, which may put a limit into debt (up to one hour of its
   * refill beyond empty; later takes then wait until it is repaid). `cost` is a number (every limit) or
   * per limit, `{ tokens: -300 }`. Resolves with the bucket as `peek` reads it right after (allowed: a
   * take of 1 would pass now), or per the fail mode when the store fails.
   */
  adjust(policy: P, key: string, cost: Cost, options?: { idempotencyKey?: string }): Promise<Decision>;
  /** Refills the bucket. */
  reset(policy: P, key: string): Promise<void>;
  /** The validated policy, or undefined. */
  policy(name: string): ResolvedPolicy | undefined;
  readonly policies: ReadonlyMap<string, ResolvedPolicy>;
  readonly store: Store;
  /** Store calls in flight now, the most allowed, the breaker state, and the tokens held in leases. */
  stats(): LimiterStats;
  /**
   * Gives every token held in a lease back to the store (what the bucket has not refilled since its
   * grant; 32 refunds at a time, outside maxPendingStoreCalls) and waits for those calls and for the
   * grants in flight. Call it when the process shuts down; afterwards leased policies go to the store
   * on every decision. A no-op without leases.
   */
  close(): Promise<void>;
}

export interface LimiterStats {
  /** Store calls started and neither settled nor timed out. */
  pendingStoreCalls: number;
  /** The maxPendingStoreCalls option: at it, decisions fail without calling the store. */
  maxPendingStoreCalls: number;
  circuit: CircuitState;
  /** Keys holding a token lease on this node, and the tokens they hold. */
  leases: { keys: number; tokens: number };
  /** Keys with a local fallback bucket on this node (onStoreError 'local'; 0 while the store answers). */
  localKeys: number;
}

const DEFAULT_ACQUIRE_TIMEOUT_MS = 30_000;
/** take()'s options when none are passed: one shared empty object, not a new one per call. */
const NO_OPTIONS: TakeOptions = Object.freeze({});
/** Retry-After suggested for a refusal caused by a store failure. */
const STORE_ERROR_RETRY_MS = 1000;
/** Most keys with a local fallback bucket on one node (the memory store's default bound). */
const LOCAL_MAX_KEYS = 100_000;

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

/** A reset is one store call too, bounded like a decision. */
async function withTimeout<T>(promise: Promise<T>, ms: number, store: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StoreError(store, `timed out after ${ms} ms`)), ms);
  });
  promise.catch(() => {});
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}


export function createLimiter<P extends string>(options: LimiterOptions<P>): Limiter<P> {
  if (!options || typeof options !== 'object') throw new ConfigError('options', 'must be an object');
  const { store } = options;
  if (!store || typeof store.step !== 'function') throw new ConfigError('store', 'must be a Store (memoryStore(), redisStore(), mongoStore())');
  const { policies, entries, idempotencyWindowMs, maxPending, denyCacheMax, leaseMaxKeys } = resolveSettings(options);
  const onDecision = options.onDecision;
  const monotonicMs = options.monotonicMs ?? (() => performance.now());
  const caller = createStoreCaller({
    store,
    breaker: createBreaker(options.circuitBreaker, monotonicMs),
    maxPending,
    monotonicMs,
    onStatus: options.onStoreStatus,
  });
  const denied = denyCacheMax > 0 ? createDenyCache(denyCacheMax) : undefined;
  const leases = [...policies.values()].some((p) => p.lease)
    ? createLeases({
        call: (storageKey, args, policy, background) => storeCall(policy, storageKey, args, background),
        monotonicMs,
        maxKeys: leaseMaxKeys,
        // A refund makes tokens this node may have refused from its deny cache: the store decides again.
        onRefund: denied ? (storageKey) => denied.forget(storageKey, monotonicMs()) : undefined,
      })
    : undefined;

  /**
   * Takes that no hook or deny cache needs to see: take()'s hot path may answer them, and without a
   * lease they are one synchronous store step when the store has stepSync (read on every decision, as a
   * store's methods are: one may be wrapped or replaced after the limiter is made).
   */
  const plainTakes = !onDecision && !denied;

  const fallback = [...policies.values()].some((p) => p.local)
    ? createLocalFallback({ maxKeys: LOCAL_MAX_KEYS, monotonicMs, policies: policies.values() })
    : undefined;

  /** The step arguments of a decision: the policy's shared ones for a take of one token with no wait. */
  function argsOf(entry: PolicyEntry, cost: Costs, maxWaitMs: number): StepArgs {
    return cost === 1 && maxWaitMs === 0 ? entry.takeOne : stepArgs(entry.policy, cost, maxWaitMs);
  }

  function getEntry(name: string): PolicyEntry {
    const e = typeof name === 'string' ? entries.get(name) : undefined;
    if (!e) throw new UnknownPolicyError(String(name));
    return e;
  }

  /**
   * The store did not decide: the fail mode does. 'local' decides from this node's bucket for the key;
   * 'allow' and 'deny' claim no bucket numbers.
   */
  function failed(policy: ResolvedPolicy, storageKey: string, cost: Costs, maxWaitMs: number): Decision {
    if (policy.local) return fallback!.decide(policy, storageKey, cost, maxWaitMs);
    const allowed = policy.onStoreError === 'allow';
    return { allowed, limit: policy.capacity, retryAfterMs: allowed ? 0 : STORE_ERROR_RETRY_MS, waitMs: 0, reason: 'store_error' } satisfies StoreErrorDecision;
  }

  type Outcome = { decision: Decision; debtUnits?: number[]; error?: unknown };

  /**
   * One store step, bounded (timeout, breaker, pending cap) unless the store is in-process. A
   * `background` step (a lease refund) is outside the pending cap; the leases bound their own.
   */
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

  /** A take of one token with no wait by a remote store (take()'s hot path): the long way's answer, without its awaits. */
  function plainTake(entry: PolicyEntry, storageKey: string): Promise<Decision> {
    const { policy } = entry;
    return storeCall(policy, storageKey, entry.takeOne).then((outcome) => (outcome.ok ? toDecision(policy, 1, outcome.result) : failed(policy, storageKey, 1, 0)));
  }

  /** One store step: the decision, plus the debt the store reported (for the deny cache). */
  /** `peek`: read (cost 0, toPeekDecision); otherwise a take of `cost`. */
  async function call(policy: ResolvedPolicy, storageKey: string, cost: Costs, maxWaitMs: number, args: StepArgs, peek = false): Promise<Outcome> {
    const outcome = await storeCall(policy, storageKey, args);
    if (!outcome.ok) return { decision: failed(policy, storageKey, peek ? 0 : cost, maxWaitMs), error: outcome.error };
    const { result } = outcome;
    return { decision: peek ? toPeekDecision(policy, result) : toDecision(policy, cost, result), debtUnits: result.debtUnits };
  }

  function emit(event: DecisionEvent): void {
    try {
      onDecision!(event);
    } catch {
      // A logging hook must never change a decision.
    }
  }

  /** Validates, then decides; a synchronous store with no hook or cache answers without any await. */
  function decide(op: 'take' | 'acquire', name: string, key: string, rawCost: Cost, maxWaitMs: number, waitUntil?: WaitUntil, idempotencyKey?: string): Promise<Decision> {
    let entry: PolicyEntry;
    let cost: Costs;
    try {
      entry = getEntry(name);
      assertKey(key);
      cost = rawCost === 1 ? 1 : resolveCost(entry.policy, rawCost);
      assertWaitMs(op === 'take' ? 'maxWaitMs' : 'timeoutMs', maxWaitMs);
      if (idempotencyKey !== undefined) assertIdempotencyKey(idempotencyKey);
    } catch (err) {
      return Promise.reject(err);
    }
    const { policy } = entry;
    const storageKey = entry.keyPrefix + key;
    if (idempotencyKey !== undefined) {
      const args = { ...argsOf(entry, cost, maxWaitMs), op: opOf(idempotencyKey, `take|${JSON.stringify(cost)}|${maxWaitMs}`) };
      return once(op, name, key, cost, policy, storageKey, args, maxWaitMs);
    }
    // A leased policy has one limit, so its cost is a number (resolveCost keeps a number a number; an
    // object's one entry is that limit's cost).
    if (leases && policy.lease) {
      const started = onDecision ? monotonicMs() : 0;
      const answer = leases.take(policy, storageKey, typeof cost === 'number' ? cost : cost[0]!, maxWaitMs, waitUntil);
      if (answer !== undefined) {
        if (!(answer instanceof Promise)) {
          if (onDecision) emit({ policy: name, key, cost, op, decision: answer, durationMs: 0 });
          return Promise.resolve(answer);
        }
        return answer.then(
          (decision) => {
            if (decision === undefined) return decideAsync(op, name, key, cost, maxWaitMs, policy, storageKey, argsOf(entry, cost, maxWaitMs));
            if (onDecision) emit({ policy: name, key, cost, op, decision, durationMs: monotonicMs() - started });
            return decision;
          },
          (error: unknown) => {
            const decision = failed(policy, storageKey, cost, maxWaitMs);
            if (onDecision) emit({ policy: name, key, cost, op, decision, durationMs: monotonicMs() - started, error });
            return decision;
          },
        );
      }
    }
    const args = argsOf(entry, cost, maxWaitMs);
    if (plainTakes && store.stepSync) return syncDecision(entry, storageKey, cost, maxWaitMs, args);
    return decideAsync(op, name, key, cost, maxWaitMs, policy, storageKey, args);
  }

  /** A decision by a synchronous store step (plainTakes, and the store has stepSync), with no await. */
  function syncDecision(entry: PolicyEntry, storageKey: string, cost: Costs, maxWaitMs: number, args: StepArgs): Promise<Decision> {
    try {
      return Promise.resolve(toDecision(entry.policy, cost, store.stepSync!(storageKey, args)));
    } catch {
      return Promise.resolve(failed(entry.policy, storageKey, cost, maxWaitMs));
    }
  }

  /** The store's op record for an idempotency key: its window, and what the request asks. */
  function opOf(id: string, fingerprint: string): OpArgs {
    return { id, ttlMs: idempotencyWindowMs, fingerprint };
  }

  /**
   * A step that only the store may answer: an adjustment (settlement is no request to admit: when the
   * store fails it rejects with StoreError, whatever the fail mode), or a take with an idempotency key
   * (a lease or the deny cache could answer a retry otherwise than the first time). A recorded answer
   * is marked `repeated`; a key reused for another request is an IdempotencyConflictError.
   */
  async function once(op: DecisionEvent['op'], name: string, key: string, cost: Costs, policy: ResolvedPolicy, storageKey: string, args: StepArgs, maxWaitMs: number): Promise<Decision> {
    const started = monotonicMs();
    const outcome = await storeCall(policy, storageKey, args);
    if (!outcome.ok) {
      if (op === 'adjust') {
        const failedDecision: StoreErrorDecision = { allowed: false, limit: policy.capacity, retryAfterMs: STORE_ERROR_RETRY_MS, waitMs: 0, reason: 'store_error' };
        if (onDecision) emit({ policy: name, key, cost, op, decision: failedDecision, durationMs: monotonicMs() - started, error: outcome.error });
        throw new StoreError(store.name, 'the adjustment was not applied: the store did not answer', { cause: outcome.error });
      }
      const decision = failed(policy, storageKey, cost, maxWaitMs);
      if (onDecision) emit({ policy: name, key, cost, op, decision, durationMs: monotonicMs() - started, error: outcome.error });
      return decision;
    }
    const { result } = outcome;
    if (result.conflict) throw new IdempotencyConflictError();
    const decision: BucketDecision = op === 'adjust' ? toPeekDecision(policy, result) : toDecision(policy, cost, result);
    if (result.repeated) decision.repeated = true;
    else if (op === 'adjust' && (typeof cost === 'number' ? cost < 0 : cost.some((c) => c < 0))) denied?.forget(storageKey, started);
    if (onDecision) emit({ policy: name, key, cost, op, decision, durationMs: monotonicMs() - started });
    return decision;
  }

  async function decideAsync(
    op: 'take' | 'acquire',
    name: string,
    key: string,
    cost: Costs,
    maxWaitMs: number,
    policy: ResolvedPolicy,
    storageKey: string,
    args: StepArgs,
  ): Promise<Decision> {
    const started = onDecision || denied ? monotonicMs() : 0;
    const hit = denied?.lookup(policy, storageKey, cost, maxWaitMs, started);
    if (hit) {
      if (onDecision) emit({ policy: name, key, cost, op, decision: hit, durationMs: 0 });
      return hit;
    }
    const { decision, debtUnits, error } = await call(policy, storageKey, cost, maxWaitMs, args);
    if (denied && !decision.allowed && decision.reason === undefined && debtUnits !== undefined) {
      denied.remember(storageKey, cost, debtUnits, started, decision.retryAfterMs);
    }
    if (onDecision) emit({ policy: name, key, cost, op, decision, durationMs: monotonicMs() - started, ...(error === undefined ? {} : { error }) });
    return decision;
  }

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
      await leases?.close();
    },
    take(name, key, opts = NO_OPTIONS) {
      // Each option is read once (a getter sees one read, as on the long way).
      const { cost, maxWaitMs, idempotencyKey } = opts;
      // The hot path: a take of one token with no wait and no idempotency key, with no hook or cache to
      // consult: decide's checks and branches reduced to the ones this case needs (each input that fails
      // one goes the long way, which names the error).
      if (plainTakes && (cost === undefined || cost === 1) && (maxWaitMs === undefined || maxWaitMs === 0) && idempotencyKey === undefined) {
        const entry = typeof name === 'string' ? entries.get(name) : undefined;
        if (entry !== undefined && !entry.policy.lease && isShortKey(key)) {
          const { policy } = entry;
          if (!store.stepSync) return plainTake(entry, entry.keyPrefix + key);
          // One limit, and a store that can take on it without a result object: the decision from numbers,
          // and no storage key built (the store finds the bucket by the prefix and the key).
          if (store.takeOneSync && policy.limits.length === 1) {
            try {
              const after = store.takeOneSync(entry.keyPrefix, key, entry.takeOne.limits[0]!);
              // Anything but a number (a custom store's bug) is a failed store call, not a decision.
              if (typeof after !== 'number' || !Number.isFinite(after)) throw new StoreError(store.name, `takeOneSync answered ${String(after)}`);
              return Promise.resolve(after >= 0 ? oneLimitDecision(policy, 1, true, after) : oneLimitDecision(policy, 1, false, -1 - after));
            } catch {
              return Promise.resolve(failed(policy, entry.keyPrefix + key, 1, 0));
            }
          }
          return syncDecision(entry, entry.keyPrefix + key, 1, 0, entry.takeOne);
        }
      }
      return decide('take', name, key, cost ?? 1, maxWaitMs ?? 0, opts.waitUntil, idempotencyKey);
    },
    async acquire(name, key, opts = {}) {
      opts.signal?.throwIfAborted();
      const wait = opts.timeoutMs ?? DEFAULT_ACQUIRE_TIMEOUT_MS;
      const decision = await decide('acquire', name, key, opts.cost ?? 1, wait, opts.waitUntil, opts.idempotencyKey);
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
      const { policy, keyPrefix } = getEntry(name);
      assertKey(key);
      const started = monotonicMs();
      const { decision, error } = await call(policy, keyPrefix + key, 0, 0, stepArgs(policy, 0, 0), true);
      if (onDecision) emit({ policy: name, key, cost: 0, op: 'peek', decision, durationMs: monotonicMs() - started, ...(error === undefined ? {} : { error }) });
      return decision;
    },
    async adjust(name, key, cost, opts = {}) {
      const { policy, keyPrefix } = getEntry(name);
      assertKey(key);
      const costs = resolveAdjustment(policy, cost);
      if (opts.idempotencyKey !== undefined) assertIdempotencyKey(opts.idempotencyKey);
      const args = adjustArgs(policy, costs);
      const withOp = opts.idempotencyKey === undefined ? args : { ...args, op: opOf(opts.idempotencyKey, `adjust|${JSON.stringify(costs)}`) };
      return once('adjust', name, key, costs, policy, keyPrefix + key, withOp, 0);
    },
    async reset(name, key) {
      const { policy, keyPrefix } = getEntry(name);
      assertKey(key);
      const storageKey = keyPrefix + key;
      denied?.forget(storageKey, monotonicMs());
      leases?.forget(storageKey);
      await withTimeout(store.reset(storageKey), policy.timeoutMs, store.name);
      // Only a reset the store applied refills the local bucket too: a failed one leaves it as it is.
      fallback?.forget(storageKey);
    },
  };
}

export { MAX_WAIT_MS };
