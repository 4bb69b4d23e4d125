// One guarded call to a remote store: bounded in time, bounded in number, behind the circuit breaker.
// A call that times out gives its slot back at once and its I/O is aborted through the signal: a store
// whose promise never settles (a hung fetch, a request context that ended) cannot exhaust the slots.
import { StoreError } from '../errors.js';
import type { StepArgs, StepOptions, StepResult, Store } from '../store.js';
import type { Breaker, CircuitState } from './breaker.js';

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

/** A call's StepOptions; its signal is made on first read (a getter on the prototype, so cheap to create). */
class CallOptions implements StepOptions {
  #controller: AbortController | undefined;
  constructor(readonly timeoutMs: number) {}
  get signal(): AbortSignal {
    return (this.#controller ??= new AbortController()).signal;
  }
  abort(reason: unknown): void {
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
      const stepOptions = new CallOptions(timeoutMs);
      // One promise settled by whichever comes first, the store's answer or the timer (no race of two
      // promises). The call's slot is freed at that moment; a store that answers later is ignored.
      // The callbacks are anonymous on purpose: a named closure per call costs a name definition
      // under some bundlers' keep-names transforms (tsx's, which the benchmarks run through).
      return new Promise<CallOutcome>((resolve) => {
        let settled = false;
        const timer = setTimeout(() => {
          if (settled) return;
          settled = true;
          pending--;
          const error = new StoreError(store.name, `timed out after ${timeoutMs} ms`);
          stepOptions.abort(error);
          breaker.failed(admission);
          resolve(failed(error));
        }, timeoutMs);
        let answer: Promise<StepResult>;
        try {
          answer = Promise.resolve(store.step(key, args, stepOptions));
        } catch (error) {
          // A store that throws synchronously is a failed call like any other.
          answer = Promise.reject(error);
        }
        answer.then(
          (result) => {
            if (settled) return;
            settled = true;
            pending--;
            clearTimeout(timer);
            breaker.succeeded(admission);
            resolve(succeeded(result));
          },
          (error: unknown) => {
            if (settled) return;
            settled = true;
            pending--;
            clearTimeout(timer);
            breaker.failed(admission);
            resolve(failed(error));
          },
        );
      });
    },
  };
}
