// One guarded call to a remote store: bounded in time, bounded in number, behind the circuit breaker.
// A call that times out gives its slot back at once and its I/O is aborted through the signal: a store
// whose promise never settles (a hung fetch, a request context that ended) cannot exhaust the slots.
import { StoreError } from '../errors.js';
import type { StepArgs, StepOptions, StepResult, Store } from '../store.js';
import type { Admission, Breaker, CircuitState } from './breaker.js';

/** A change of the store's availability, as seen by decisions: one 'down' per outage, one 'up' after it. */
export type StoreStatusEvent =
  | { status: 'down'; store: string; error: unknown }
  | { status: 'up'; store: string; /** How long decisions saw the store as down, in ms. */ downMs: number };

export type CallOutcome = { ok: true; result: StepResult } | { ok: false; error: unknown };

export interface StoreCaller {
  call(key: string, args: StepArgs, timeoutMs: number): Promise<CallOutcome>;
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
  let downSinceMs: number | undefined;

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

  /** Settles a call once: frees its slot, stops its timer, tells the breaker. False if it had settled. */
  function settle(c: Call, ok: boolean): boolean {
    if (c.settled) return false;
    c.settled = true;
    pending--;
    clearTimeout(c.timer);
    if (ok) breaker.succeeded(c.admission);
    else breaker.failed(c.admission);
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
    call(key, args, timeoutMs) {
      const admission = breaker.enter();
      if (admission === 'refused') return Promise.resolve(failed(CIRCUIT_OPEN));
      if (pending >= maxPending) {
        breaker.release(admission);
        return Promise.resolve(failed(new StoreError(store.name, `${pending} store calls are already in flight (maxPendingStoreCalls)`)));
      }
      pending++;
      // The abort signal is made only if the store reads it (see StepOptions.signal): ioredis and
      // @upstash/redis calls take no signal, and an AbortController per call cost ~4 % at concurrency 1.
      const c = new Call(timeoutMs, admission);
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
            if (settle(c, false)) resolve(failed(error));
          },
        );
      });
    },
  };
}
