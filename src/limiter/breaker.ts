// Circuit breaker for store calls: consecutive failures open it; while open, decisions fail fast
// without touching the store; after the cool-down exactly one probe goes through and decides.
import { ConfigError } from '../errors.js';

/** When the circuit breaker opens (consecutive failed store requests) and how long it stays open. */
export interface CircuitBreakerOptions {
  /** Consecutive store failures that open the circuit. @default 5 */
  failureThreshold?: number;
  /** How long the circuit stays open (decisions fail fast) before one probe is let through, in ms. @default 500 */
  cooldownMs?: number;
}

/** The circuit breaker's state: 'closed' (store calls go through), 'open' (decisions fail fast per onStoreError), 'half-open' (one probe is let through). */
export type CircuitState = 'closed' | 'open' | 'half-open';

/** What `enter()` grants: a normal call, the one probe of a half-open circuit, or nothing (fail fast). */
export type Admission = 'call' | 'probe' | 'refused';

export interface Breaker {
  enter(): Admission;
  /** The call admitted as `admission` succeeded. */
  succeeded(admission: Admission): void;
  /** The call admitted as `admission` failed. */
  failed(admission: Admission): void;
  /** A probe that never reached the store (e.g. no free call slot) gives its turn back. */
  release(admission: Admission): void;
  state(): CircuitState;
}

export const DEFAULT_BREAKER = { failureThreshold: 5, cooldownMs: 500 } as const;

/** Validates the options once, at limiter creation. `false` gives a breaker that never opens. */
export function createBreaker(options: CircuitBreakerOptions | false | undefined, monotonicMs: () => number): Breaker {
  if (options === false) {
    return { enter: () => 'call', succeeded() {}, failed() {}, release() {}, state: () => 'closed' };
  }
  const { failureThreshold, cooldownMs } = { ...DEFAULT_BREAKER, ...options };
  if (!Number.isInteger(failureThreshold) || failureThreshold < 1) {
    throw new ConfigError('circuitBreaker.failureThreshold', `must be a positive integer, got ${String(failureThreshold)}`);
  }
  if (!Number.isFinite(cooldownMs) || cooldownMs < 0) {
    throw new ConfigError('circuitBreaker.cooldownMs', `must be a non-negative number, got ${String(cooldownMs)}`);
  }
  let failures = 0;
  let openUntilMs = 0;
  let probing = false;
  const isOpen = () => failures >= failureThreshold;

  return {
    enter() {
      if (!isOpen()) return 'call';
      if (probing || monotonicMs() < openUntilMs) return 'refused';
      probing = true;
      return 'probe';
    },
    succeeded(admission) {
      failures = 0;
      // Only the probe ends the probe: a call that started before the circuit opened may settle meanwhile.
      if (admission === 'probe') probing = false;
    },
    failed(admission) {
      failures++;
      if (isOpen()) openUntilMs = monotonicMs() + cooldownMs;
      if (admission === 'probe') probing = false;
    },
    release(admission) {
      if (admission === 'probe') probing = false;
    },
    state: () => (!isOpen() ? 'closed' : monotonicMs() < openUntilMs ? 'open' : 'half-open'),
  };
}
