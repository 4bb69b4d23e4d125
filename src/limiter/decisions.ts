// The decision path: take (with its hot path for a token with no wait), acquire and peek. Each is one
// store step, answered by a lease or the deny cache where the policy has them, and by the fail mode when
// the store does not answer; a take with an idempotency key goes the idempotent path (./idempotent.ts).
import { oneLimitDecision, stepArgs, type Costs } from '../core/gcra.js';
import type { Decision } from '../core/decision.js';
import { assertIdempotencyKey, assertKey, assertWaitMs, isShortKey, resolveCost, type Cost } from '../core/key.js';
import type { ResolvedPolicy } from '../core/policy.js';
import { AcquireTimeoutError, StoreError } from '../errors.js';
import type { StepArgs, StepResult } from '../store.js';
import type { WaitUntil } from './lease.js';
import type { Idempotent } from './idempotent.js';
import type { PolicyEntry } from './entry.js';
import type { AcquireOptions, TakeOptions } from './types.js';
import type { Wiring } from './wiring.js';
import { seenOf } from './policy-wide.js';

export interface Decisions {
  take(name: string, key: string, options?: TakeOptions): Promise<Decision>;
  acquire(name: string, key: string, options?: AcquireOptions): Promise<Decision>;
  peek(name: string, key: string): Promise<Decision>;
  /** A peek no onDecision hears of: an administrative action's `before` (the audit's, not a caller's read). */
  peekQuietly(name: string, key: string): Promise<Decision>;
  /** Resolves once every decision that was waiting for a policy-wide reading has been decided (close() waits for them). */
  drain(): Promise<void>;
}

const DEFAULT_ACQUIRE_TIMEOUT_MS = 30_000;
/** take()'s options when none are passed: one shared empty object, not a new one per call. */
const NO_OPTIONS: TakeOptions = Object.freeze({});

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

/** The step arguments of a decision: the policy's shared ones for a take of one token with no wait. */
function argsOf(entry: PolicyEntry, cost: Costs, maxWaitMs: number): StepArgs {
  return cost === 1 && maxWaitMs === 0 ? entry.takeOne : stepArgs(entry.policy, cost, maxWaitMs, entry.change, seenOf(entry), entry.holdMs);
}

export function createDecisions(w: Wiring, idempotent: Idempotent): Decisions {
  const { store, entries, monotonicMs, onDecision, denied, leases, policyWide, getEntry, storeCall, failed, decided, emit } = w;
  /**
   * Takes that no hook or deny cache needs to see: take()'s hot path may answer them, and without a
   * lease they are one synchronous store step when the store has stepSync (read on every decision, as a
   * store's methods are: one may be wrapped or replaced after the limiter is made).
   */
  const plainTakes = !onDecision && !denied;

  /** A take of one token with no wait by a remote store (take()'s hot path): the long way's answer, without its awaits. */
  function plainTake(entry: PolicyEntry, storageKey: string): Promise<Decision> {
    const { policy } = entry;
    const started = monotonicMs();
    return storeCall(policy, storageKey, entry.takeOne).then((outcome) => (outcome.ok ? decided(policy, storageKey, 1, outcome.result, started) : failed(policy, storageKey, 1, 0)));
  }

  /**
   * One store step: the decision (`peek`: a read), plus the debt the store reported and the numbers it
   * was in (for the deny cache).
   */
  async function call(policy: ResolvedPolicy, storageKey: string, cost: Costs, maxWaitMs: number, args: StepArgs, peek = false): Promise<{ decision: Decision; debtUnits?: number[]; limits?: StepResult['limits']; error?: unknown }> {
    const started = monotonicMs();
    const outcome = await storeCall(policy, storageKey, args);
    if (!outcome.ok) return { decision: failed(policy, storageKey, peek ? 0 : cost, maxWaitMs), error: outcome.error };
    const { result } = outcome;
    return { decision: decided(policy, storageKey, cost, result, started, peek), debtUnits: result.debtUnits, limits: result.limits };
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
    // The policy-wide change this node sees may be too old to decide with (./policy-wide.ts): then the
    // decision waits for the next reading (once: it decides after that whatever the reading's age).
    const wait = policyWide === undefined || policyWide.fresh(entry) ? undefined : policyWide.refresh(entry, monotonicMs(), waitUntil);
    if (wait !== undefined) return held(wait.then(() => decideNow(op, name, key, entry, cost, maxWaitMs, waitUntil, idempotencyKey)));
    return decideNow(op, name, key, entry, cost, maxWaitMs, waitUntil, idempotencyKey);
  }

  /** decide() after validation and the policy-wide reading. */
  function decideNow(op: 'take' | 'acquire', name: string, key: string, entry: PolicyEntry, cost: Costs, maxWaitMs: number, waitUntil?: WaitUntil, idempotencyKey?: string): Promise<Decision> {
    const { policy } = entry;
    const storageKey = entry.keyPrefix + key;
    if (idempotencyKey !== undefined) {
      const args = idempotent.withOp(argsOf(entry, cost, maxWaitMs), idempotencyKey, `take|${JSON.stringify(cost)}|${maxWaitMs}`);
      return idempotent.once(op, name, key, cost, policy, storageKey, args, maxWaitMs);
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
      return Promise.resolve(decided(entry.policy, storageKey, cost, store.stepSync!(storageKey, args)));
    } catch {
      return Promise.resolve(failed(entry.policy, storageKey, cost, maxWaitMs));
    }
  }

  async function decideAsync(op: 'take' | 'acquire', name: string, key: string, cost: Costs, maxWaitMs: number, policy: ResolvedPolicy, storageKey: string, args: StepArgs): Promise<Decision> {
    const started = onDecision || denied ? monotonicMs() : 0;
    const hit = denied?.lookup(policy, storageKey, cost, maxWaitMs, started);
    if (hit) {
      if (onDecision) emit({ policy: name, key, cost, op, decision: hit, durationMs: 0 });
      return hit;
    }
    const { decision, debtUnits, limits, error } = await call(policy, storageKey, cost, maxWaitMs, args);
    // A block is not cached (an unblock through another node would not be seen until it ends).
    if (denied && !decision.allowed && decision.reason === undefined && debtUnits !== undefined) {
      denied.remember(storageKey, w.inForce.policyOf(policy, limits), decision.limitsInForce, cost, debtUnits, started, decision.retryAfterMs);
    }
    if (onDecision) emit({ policy: name, key, cost, op, decision, durationMs: monotonicMs() - started, ...(error === undefined ? {} : { error }) });
    return decision;
  }

  /**
   * Decisions (and reads) waiting for a policy-wide reading before their store step: a close() made
   * meanwhile lets them decide before it closes the store (a redisStore with closeClient would refuse
   * them otherwise). Only these are held: a decision with a fresh reading is a store call already.
   */
  const waiting = new Set<Promise<unknown>>();
  function held<T>(p: Promise<T>): Promise<T> {
    waiting.add(p);
    const done = () => {
      waiting.delete(p);
    };
    p.then(done, done);
    return p;
  }

  return {
    drain: async () => {
      await Promise.allSettled([...waiting]);
    },
    take(name, key, opts = NO_OPTIONS) {
      // Each option is read once (a getter sees one read, as on the long way).
      const { cost, maxWaitMs, idempotencyKey } = opts;
      // The hot path: a take of one token with no wait and no idempotency key, with no hook or cache to
      // consult: decide's checks and branches reduced to the ones this case needs (each input that fails
      // one goes the long way, which names the error).
      if (plainTakes && (cost === undefined || cost === 1) && (maxWaitMs === undefined || maxWaitMs === 0) && idempotencyKey === undefined) {
        const entry = typeof name === 'string' ? entries.get(name) : undefined;
        // A reading of the policy-wide change that is not fresh goes the long way, which refreshes it.
        if (entry !== undefined && !entry.policy.lease && isShortKey(key) && (policyWide === undefined || policyWide.fresh(entry))) {
          const { policy } = entry;
          if (!store.stepSync) return plainTake(entry, entry.keyPrefix + key);
          // One limit, and a store that can take on it without a result object: the decision from numbers,
          // and no storage key built (the store finds the bucket by the prefix and the key). Not while a
          // policy-wide change is seen: only the step's arguments carry it.
          if (store.takeOneSync && policy.limits.length === 1 && entry.change === undefined) {
            try {
              const after = store.takeOneSync(entry.keyPrefix, key, entry.takeOne.limits[0]!, entry.takeOne.policySeenUs);
              // NaN: the key has an override record (or a bucket older than the version read), and the step with the base numbers answers.
              if (after !== after) return syncDecision(entry, entry.keyPrefix + key, 1, 0, entry.takeOne);
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
    peek: (name, key) => read(name, key, true),
    peekQuietly: (name, key) => read(name, key, false),
  };

  async function read(name: string, key: string, heard: boolean): Promise<Decision> {
    const entry = getEntry(name);
    assertKey(key);
    const started = monotonicMs();
    if (policyWide !== undefined && !policyWide.fresh(entry)) {
      const wait = policyWide.refresh(entry, started);
      // Held like a decision's: close() must not close the store between the reading and this step.
      if (wait !== undefined) return held(wait.then(() => readNow(name, key, entry, started, heard)));
    }
    return readNow(name, key, entry, started, heard);
  }

  async function readNow(name: string, key: string, entry: PolicyEntry, started: number, heard: boolean): Promise<Decision> {
    const { policy, keyPrefix } = entry;
    const { decision, error } = await call(policy, keyPrefix + key, 0, 0, stepArgs(policy, 0, 0, entry.change, seenOf(entry), entry.holdMs), true);
    if (onDecision && heard) emit({ policy: name, key, cost: 0, op: 'peek', decision, durationMs: monotonicMs() - started, ...(error === undefined ? {} : { error }) });
    return decision;
  }
}
