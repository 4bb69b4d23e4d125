// Typed errors. Every message starts with "[edge-limiter]" and, where a store is involved, its name,
// so a log line says where it came from; the underlying error is kept as `cause`.

/** Base class: `code` is stable and safe to branch on. */
export class LimiterError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(`[edge-limiter] ${message}`, options);
    // Each class names itself in a string: a minified bundle (the Worker's) renames classes.
    this.name = 'LimiterError';
    this.code = code;
  }
}

/** A policy or limiter option is invalid. Thrown when the limiter is created, never per request. */
export class ConfigError extends LimiterError {
  /** The offending field, e.g. `policies.api.capacity`. */
  readonly field: string;
  constructor(field: string, message: string) {
    super('invalid_config', `invalid config: ${field} ${message}`);
    this.name = 'ConfigError';
    this.field = field;
  }
}

/**
 * A request argument (key, cost, maxWaitMs, policy name) is invalid. It is a RangeError so callers
 * that only check for RangeError still catch it. Nothing was sent to the store.
 */
export class InvalidInputError extends RangeError {
  readonly code = 'invalid_input';
  readonly field: string;
  constructor(field: string, message: string) {
    super(`[edge-limiter] invalid ${field}: ${message}`);
    this.name = 'InvalidInputError';
    this.field = field;
  }
}

/**
 * An idempotency key was used before, within its window, for another request (other costs, wait or
 * kind): nothing was applied. Its field is `idempotencyKey`.
 */
export class IdempotencyConflictError extends InvalidInputError {
  /** `field` is `charge` for a settlement of a charge settled before with another cost. */
  constructor(field = 'idempotencyKey', message = 'was used before for another request (other cost, wait or kind); nothing was applied') {
    super(field, message);
    this.name = 'IdempotencyConflictError';
  }
}

/**
 * A settlement (limiter.settle) named a charge that the store holds no record of on this policy and key:
 * no take was made with that idempotency key there, or it is older than the limiter's
 * idempotencyWindowMs (or was evicted: see memoryStore's maxOps). Nothing was applied.
 */
export class UnknownChargeError extends LimiterError {
  readonly charge: string;
  constructor(charge: string) {
    super('unknown_charge', 'no such charge on this key within the idempotency window; nothing was applied');
    this.name = 'UnknownChargeError';
    this.charge = charge;
  }
}

/** The policy name is not configured. */
export class UnknownPolicyError extends LimiterError {
  readonly policy: string;
  constructor(policy: string) {
    super('unknown_policy', `unknown policy ${JSON.stringify(policy.slice(0, 64))}`);
    this.name = 'UnknownPolicyError';
    this.policy = policy;
  }
}

/**
 * The store failed, timed out, or the circuit breaker is open. `permanent`: the store refused a runtime
 * change it will refuse again, so a retry cannot help: `unsupported`, it keeps no runtime limits (no
 * Store.override); `full`, it has no room for another override record (memoryStore's maxOverrides).
 */
export class StoreError extends LimiterError {
  readonly store: string;
  readonly permanent?: 'unsupported' | 'full';
  constructor(store: string, message: string, options?: { cause?: unknown; permanent?: 'unsupported' | 'full' }) {
    super('store_error', `[${store}] ${message}`, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'StoreError';
    this.store = store;
    if (options?.permanent) this.permanent = options.permanent;
  }
}

/** `acquire` could not get a permit within its timeout. Nothing was consumed. */
export class AcquireTimeoutError extends LimiterError {
  /** Ms until the requested tokens exist (0 if unknown). */
  readonly retryAfterMs: number;
  constructor(message: string, retryAfterMs: number) {
    super('acquire_timeout', message);
    this.name = 'AcquireTimeoutError';
    this.retryAfterMs = retryAfterMs;
  }
}

/** Renders a config value for an error message without dumping large or nested input. */
export function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value}`;
}
