// One guarded call to a remote store: bounded in time, bounded in number, behind the circuit breaker.
// A call that times out gives its slot back at once and its I/O is aborted through the signal: a store
// whose promise never settles (a hung fetch, a request context that ended) cannot exhaust the slots.
//
// The breaker counts a failure once per store request, not once per decision in it: a Redis batch (or
// an auto-pipelined @upstash/redis request) that fails rejects each of its decisions with the same
// error object, or with errors whose `cause` chain ends at the same object, and that object counts once
// among the calls that were already started when it was first seen. A call started later that fails
// with the same object (a client that reuses one error) counts again.
import { StoreError } from '../errors.js';
import type { StepArgs, StepOptions, StepResult, Store } from '../store.js';
import type { Admission, Breaker, CircuitState } from './breaker.js';

/** A change of the store's availability, as seen by decisions: one 'down' per outage, one 'up' after it. */
export type StoreStatusEvent =
  | { status: 'down'; store: string; error: unknown }
  | { status: 'up'; store: string; /** How long decisions saw the store as down, in ms. */ downMs: number };

export type CallOutcome = { ok: true; result: StepResult } | { ok: false; error: unknown };

export interface StoreCaller {
  /**
   * One bounded store call. A `background` call (a lease refund) does not count against, and is never
   * refused by, maxPendingStoreCalls: that cap bounds decisions; the caller bounds its background calls.
   */
  call(key: string, args: StepArgs, timeoutMs: number, background?: boolean): Promise<CallOutcome>;
  /** Store calls in flight now: started, and neither settled nor timed out. */
  pending(): number;
  readonly maxPending: number;
  circuit(): CircuitState;
}

export interface StoreCallerOptions {
  store: Store;
  breaker: Breaker;
  maxPending: number;
  monotonicMs: () => number;
  onStatus?: (event: StoreStatusEvent) => void;
}

/** The onDecision `error` of a decision skipped because the circuit breaker is open. */
export const CIRCUIT_OPEN = new StoreError('circuit', 'circuit breaker open: the store failed repeatedly; failing fast until the next probe');

/** The onDecision `error` of a decision refused by this node's maxPendingStoreCalls: the store was not asked. */
export const AT_PENDING_CAP = new StoreError('limiter', 'maxPendingStoreCalls store calls are already in flight: the store was not asked');

/** Whether a decision's error says the store was never asked (its duration says nothing of the store's latency). */
export function storeNotAsked(error: unknown): boolean {
  return error === CIRCUIT_OPEN || error === AT_PENDING_CAP;
}

/**
 * One call in flight: its StepOptions (the signal is made on first read, by a getter on the prototype,
 * so a call costs no AbortController unless the store wants one) and whether it has settled.
 */
class Call implements StepOptions {
  #controller: AbortController | undefined;
  /** Set when the timer fired: a signal first read after that is made already aborted. */
  #abortReason: unknown;
  settled = false;
  timer: ReturnType<typeof setTimeout> | undefined;
  constructor(
    readonly timeoutMs: number,
    readonly admission: Admission,
    /** The number of calls started before and with this one (for counting a shared error once). */
    readonly seq: number,
    /** A background call, outside the pending count. */
    readonly background: boolean,
  ) {}
  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#abortReason !== undefined) this.#controller.abort(this.#abortReason);
    }
    return this.#controller.signal;
  }
  abort(reason: unknown): void {
    this.#abortReason = reason;
    this.#controller?.abort(reason);
  }
}

export function createStoreCaller(options: StoreCallerOptions): StoreCaller {
  const { store, breaker, maxPending, monotonicMs, onStatus } = options;
  let pending = 0;
  let started = 0;
  let downSinceMs: number | undefined;
  /** Root errors the breaker has counted, with the number of calls started when each was first seen. */
  const counted = new WeakMap<object, number>();

  function report(event: StoreStatusEvent): void {
    try {
      onStatus?.(event);
    } catch {
      // A logging hook must never change a decision.
    }
  }

  function failed(error: unknown): CallOutcome {
    if (downSinceMs === undefined) {
      downSinceMs = monotonicMs();
      report({ status: 'down', store: store.name, error });
    }
    return { ok: false, error };
  }

  /** True when `error` is another decision's share of a failed request the breaker already counted. */
  function countedBefore(c: Call, error: unknown): boolean {
    const root = rootCause(error);
    if (typeof root !== 'object' || root === null) return false;
    const seen = counted.get(root);
    if (seen !== undefined && c.seq <= seen) return true;
    counted.set(root, started);
    return false;
  }

  /** Settles a call once: frees its slot, stops its timer, tells the breaker. False if it had settled. */
  function settle(c: Call, ok: boolean, error?: unknown): boolean {
    if (c.settled) return false;
    c.settled = true;
    if (!c.background) pending--;
    clearTimeout(c.timer);
    if (ok) breaker.succeeded(c.admission);
    // The probe's failure always counts: it re-arms the cool-down.
    else if (c.admission === 'probe' || !countedBefore(c, error)) breaker.failed(c.admission);
    return true;
  }

  function succeeded(result: StepResult): CallOutcome {
    if (downSinceMs !== undefined) {
      report({ status: 'up', store: store.name, downMs: monotonicMs() - downSinceMs });
      downSinceMs = undefined;
    }
    return { ok: true, result };
  }

  return {
    maxPending,
    pending: () => pending,
    circuit: () => breaker.state(),
    call(key, args, timeoutMs, background = false) {
      const admission = breaker.enter();
      if (admission === 'refused') return Promise.resolve(failed(CIRCUIT_OPEN));
      if (!background && pending >= maxPending) {
        breaker.release(admission);
        // This node's own cap refused, not the store: no outage is reported.
        return Promise.resolve({ ok: false, error: AT_PENDING_CAP });
      }
      if (!background) pending++;
      // The abort signal is made only if the store reads it (see StepOptions.signal): ioredis and
      // @upstash/redis calls take no signal, and an AbortController per call cost ~4 % at concurrency 1.
      const c = new Call(timeoutMs, admission, ++started, background);
      // One promise settled by whichever comes first, the store's answer or the timer (no race of two
      // promises). The call's slot is freed at that moment; a store that answers later is ignored.
      // The callbacks are anonymous on purpose: a named closure per call costs a name definition
      // under some bundlers' keep-names transforms (tsx's, which the benchmarks run through).
      return new Promise<CallOutcome>((resolve) => {
        c.timer = setTimeout(() => {
          if (!settle(c, false)) return;
          const error = new StoreError(store.name, `timed out after ${timeoutMs} ms`);
          c.abort(error);
          resolve(failed(error));
        }, timeoutMs);
        let answer: Promise<StepResult>;
        try {
          answer = Promise.resolve(store.step(key, args, c));
        } catch (error) {
          // A store that throws synchronously is a failed call like any other.
          answer = Promise.reject(error);
        }
        answer.then(
          (result) => {
            if (settle(c, true)) resolve(succeeded(result));
          },
          (error: unknown) => {
            if (settle(c, false, error)) resolve(failed(error));
          },
        );
      });
    },
  };
}

/**
 * The innermost `cause` of an error (at most 8 deep): a store wraps its client's error in a StoreError
 * per decision, so the decisions of one failed request share the root, not the wrapper.
 */
function rootCause(error: unknown): unknown {
  let e = error;
  for (let i = 0; i < 8 && e instanceof Error && e.cause !== undefined; i++) e = e.cause;
  return e;
}
