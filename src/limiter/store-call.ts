// One guarded call to a remote store: bounded in time, bounded in number, behind the circuit breaker.
// A call that times out gives its slot back at once and its I/O is aborted through the signal: a store
// whose promise never settles (a hung fetch, a request context that ended) cannot exhaust the slots.
import { StoreError } from '../errors.js';
import type { StepArgs, StepResult, Store } from '../store.js';
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
    async call(key, args, timeoutMs) {
      const admission = breaker.enter();
      if (admission === 'refused') return failed(CIRCUIT_OPEN);
      if (pending >= maxPending) {
        breaker.release(admission);
        return failed(new StoreError(store.name, `${pending} store calls are already in flight (maxPendingStoreCalls)`));
      }
      pending++;
      const controller = new AbortController();
      let timer: ReturnType<typeof setTimeout> | undefined;
      try {
        // A store that throws synchronously is a failed call like any other (caught below).
        const call = store.step(key, args, { signal: controller.signal, timeoutMs });
        const timeout = new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const error = new StoreError(store.name, `timed out after ${timeoutMs} ms`);
            controller.abort(error);
            reject(error);
          }, timeoutMs);
        });
        // Promise.race subscribes to both, so a call that rejects after the timeout won is handled.
        const result = await Promise.race([call, timeout]);
        breaker.succeeded(admission);
        return succeeded(result);
      } catch (error) {
        breaker.failed(admission);
        return failed(error);
      } finally {
        clearTimeout(timer);
        pending--;
      }
    },
  };
}
