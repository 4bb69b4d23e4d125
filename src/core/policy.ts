// Policy validation and the derived numbers the token-bucket math needs. Pure: no I/O, no clock.
import { ConfigError } from '../errors.js';

export const MAX_CAPACITY = 1e9;
export const MIN_REFILL_PER_SECOND = 1e-6;
export const MAX_REFILL_PER_SECOND = 1e6;
/**
 * The longest time to refill an empty bucket (capacity / refillPerSecond), in ms: 1e15 ms, about 31,700
 * years. Below it every number a decision carries stays a safe integer in ms (JSON) and fits an HTTP
 * structured-field integer (15 digits) in seconds, and every Redis expiry is a valid PX.
 */
export const MAX_BURST_MS = 1e15;
/** Policy names become part of store keys and of quoted header values, so they are kept plain. */
export const POLICY_NAME_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

export type FailMode = 'deny' | 'allow';

/** A token bucket as the user writes it. */
export interface PolicyConfig {
  /** Bucket size in tokens: an integer from 1 to 1e9. Also the largest cost one request can ask for. */
  capacity: number;
  /** Tokens added per second, continuously: a finite number from 1e-6 to 1e6 (1/30 is fine). */
  refillPerSecond: number;
  /** What a decision is when the store fails or times out. @default the limiter's `onStoreError` ('deny') */
  onStoreError?: FailMode;
  /** Shadow mode: the HTTP layers report the decision but never block. @default false */
  shadow?: boolean;
  /** Per-policy bound on one store call, in ms. @default the limiter's `timeoutMs` */
  timeoutMs?: number;
  /**
   * Token leases for hot keys (opt-in): this node takes up to `tokens` tokens of a key's bucket in one
   * store call and answers takes on that key from them without a store call, refilling in the
   * background at the low-water mark. Never over-admits (every token answered was first taken from the
   * store); other nodes may be refused while tokens sit in a lease: at most nodes × tokens per key.
   * Decisions answered from a lease carry reason 'lease' and this node's view (remaining = tokens left
   * in its lease). Off by default.
   */
  lease?: LeaseConfig;
}

export interface LeaseConfig {
  /** Most tokens taken in one store call: an integer from 1 to the capacity. */
  tokens: number;
  /** Unused tokens go back to the store this long after their grant, in ms (1 to 3600000). */
  maxAgeMs: number;
  /** Refill in the background when the lease holds this many tokens or fewer. @default half of tokens, rounded down */
  lowWater?: number;
}

/** A policy's validated lease settings. */
export interface LeaseSettings {
  readonly tokens: number;
  readonly maxAgeMs: number;
  readonly lowWater: number;
}

/** A validated policy with the derived GCRA numbers. */
export interface ResolvedPolicy {
  readonly name: string;
  readonly capacity: number;
  readonly refillPerSecond: number;
  readonly onStoreError: FailMode;
  readonly shadow: boolean;
  readonly timeoutMs: number;
  /** Ms for one token to refill: 1000 / refillPerSecond. */
  readonly intervalMs: number;
  /** Ms to refill an empty bucket: capacity * intervalMs (GCRA's burst tolerance). */
  readonly burstMs: number;
  /**
   * Ms of debt forgiven for float rounding and clock resolution: 1 µs plus 2e-15 of the burst (a few
   * ulps of a double that large). Only extreme policies notice the second term: at capacity 1e9 and
   * 1e-6 tokens/s (one token per 11.6 days) it is 2 s.
   */
  readonly slackMs: number;
  /** Seconds in the RateLimit-Policy `w` parameter: the time to refill the bucket, rounded up. */
  readonly windowSeconds: number;
  /** Token leases, when the policy opts in. */
  readonly lease?: LeaseSettings;
}

const KNOWN_FIELDS = new Set(['capacity', 'refillPerSecond', 'onStoreError', 'shadow', 'timeoutMs', 'lease']);
const LEASE_FIELDS = new Set(['tokens', 'maxAgeMs', 'lowWater']);

export interface PolicyDefaults {
  onStoreError: FailMode;
  timeoutMs: number;
}

export function validateTimeoutMs(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 60_000) {
    throw new ConfigError(field, `must be an integer from 1 to 60000 (ms), got ${show(value)}`);
  }
  return value;
}

export function validateFailMode(field: string, value: unknown): FailMode {
  if (value !== 'deny' && value !== 'allow') {
    throw new ConfigError(field, `must be "deny" or "allow", got ${show(value)}`);
  }
  return value;
}

/** Validates one policy; throws ConfigError naming `policies.<name>.<field>` and the value. */
export function resolvePolicy(name: string, config: unknown, defaults: PolicyDefaults): ResolvedPolicy {
  if (!POLICY_NAME_PATTERN.test(name)) {
    throw new ConfigError(`policies[${JSON.stringify(name.slice(0, 80))}]`, 'name must match /^[A-Za-z0-9_.-]{1,64}$/');
  }
  const at = (field: string) => `policies.${name}.${field}`;
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new ConfigError(`policies.${name}`, `must be an object, got ${show(config)}`);
  }
  const c = config as Record<string, unknown>;
  for (const field of Object.keys(c)) {
    if (!KNOWN_FIELDS.has(field)) throw new ConfigError(at(field), 'is not a known field');
  }
  const { capacity, refillPerSecond } = c;
  if (typeof capacity !== 'number' || !Number.isInteger(capacity) || capacity < 1 || capacity > MAX_CAPACITY) {
    throw new ConfigError(at('capacity'), `must be an integer from 1 to 1e9, got ${show(capacity)}`);
  }
  if (
    typeof refillPerSecond !== 'number' ||
    !Number.isFinite(refillPerSecond) ||
    refillPerSecond < MIN_REFILL_PER_SECOND ||
    refillPerSecond > MAX_REFILL_PER_SECOND
  ) {
    throw new ConfigError(at('refillPerSecond'), `must be a finite number from 1e-6 to 1e6, got ${show(refillPerSecond)}`);
  }
  const onStoreError = c.onStoreError === undefined ? defaults.onStoreError : validateFailMode(at('onStoreError'), c.onStoreError);
  if (c.shadow !== undefined && typeof c.shadow !== 'boolean') {
    throw new ConfigError(at('shadow'), `must be a boolean, got ${show(c.shadow)}`);
  }
  const timeoutMs = c.timeoutMs === undefined ? defaults.timeoutMs : validateTimeoutMs(at('timeoutMs'), c.timeoutMs);
  const intervalMs = 1000 / refillPerSecond;
  const burstMs = capacity * intervalMs;
  if (burstMs > MAX_BURST_MS) {
    throw new ConfigError(
      at('refillPerSecond'),
      `is too slow for capacity ${capacity}: refilling the empty bucket would take ${(burstMs / 1000).toExponential(3)} s, ` +
        `and the limit is capacity / refillPerSecond <= ${MAX_BURST_MS / 1000} s (about 31,700 years)`,
    );
  }
  const lease = c.lease === undefined ? undefined : resolveLease(at('lease'), c.lease, capacity);
  return Object.freeze({
    name,
    capacity,
    refillPerSecond,
    onStoreError,
    shadow: c.shadow === true,
    timeoutMs,
    intervalMs,
    burstMs,
    slackMs: 0.001 + burstMs * 2e-15,
    windowSeconds: Math.max(1, Math.ceil(burstMs / 1000 - 1e-9)),
    ...(lease ? { lease } : {}),
  });
}

function resolveLease(field: string, value: unknown, capacity: number): LeaseSettings {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new ConfigError(field, `must be an object, got ${show(value)}`);
  const l = value as Record<string, unknown>;
  for (const f of Object.keys(l)) if (!LEASE_FIELDS.has(f)) throw new ConfigError(`${field}.${f}`, 'is not a known field');
  const { tokens, maxAgeMs } = l;
  if (typeof tokens !== 'number' || !Number.isInteger(tokens) || tokens < 1 || tokens > capacity) {
    throw new ConfigError(`${field}.tokens`, `must be an integer from 1 to the capacity (${capacity}), got ${show(tokens)}`);
  }
  if (typeof maxAgeMs !== 'number' || !Number.isInteger(maxAgeMs) || maxAgeMs < 1 || maxAgeMs > 3_600_000) {
    throw new ConfigError(`${field}.maxAgeMs`, `must be an integer from 1 to 3600000 (ms), got ${show(maxAgeMs)}`);
  }
  const lowWater = l.lowWater ?? Math.floor(tokens / 2);
  if (typeof lowWater !== 'number' || !Number.isInteger(lowWater) || lowWater < 0 || lowWater >= tokens) {
    throw new ConfigError(`${field}.lowWater`, `must be an integer from 0 to tokens - 1 (${tokens - 1}), got ${show(lowWater)}`);
  }
  return Object.freeze({ tokens, maxAgeMs, lowWater });
}

/** Renders a config value for an error message without dumping large or nested input. */
export function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value}`;
}
