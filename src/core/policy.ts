// Policies: the config types a user writes, and their validation into the resolved policy every decision
// reads (the exact rate arithmetic is ./rate.ts). Pure: no I/O, no clock.
import { ConfigError, show } from '../errors.js';
import { exactRate, MAX_REFILL_PER_SECOND, MIN_REFILL_PER_SECOND, refillOf, type Refill } from './rate.js';

export { MAX_CAPACITY_UNITS, MAX_LIMIT_UNITS, MAX_RATE_ROUNDING, MAX_REFILL_PER_SECOND, MIN_REFILL_PER_SECOND, exactRate, type Refill } from './rate.js';

export const MAX_CAPACITY = 1e9;
/** Policy names become part of store keys and of quoted header values, so they are kept plain. */
export const POLICY_NAME_PATTERN = /^(?!\.\.?$)[\w.-]{1,64}$/;

/**
 * What a decision is when the store fails: refuse, admit, or decide from a local bucket on this node
 * (PolicyConfig.local).
 */
export type FailMode = 'deny' | 'allow' | 'local';

/** Limit names become part of header values (`"<policy>.<limit>"`), so they are kept plain. */
export const LIMIT_NAME_PATTERN = /^[A-Za-z0-9_-]{1,32}$/;
/** The most limits one policy may hold. */
export const MAX_LIMITS = 8;

/** One token bucket: a limit of a policy (or written with `refill`, RefillLimitConfig). */
export interface LimitConfig {
  /** Bucket size in tokens: an integer from 1 to 1e9. Also the largest cost one request can ask of it. */
  capacity: number;
  /** Tokens added per second, continuously: a finite number from 1e-6 to 1e6 (1/30 is fine). */
  refillPerSecond: number;
  refill?: undefined;
}

/**
 * A limit whose refill is written per second, minute, hour or day: `{ capacity: 1000, refill: '1000/day' }`
 * is exactly `{ capacity: 1000, refillPerSecond: 1000 / 86400 }`.
 */
export interface RefillLimitConfig {
  /** As LimitConfig.capacity. */
  capacity: number;
  /**
   * Tokens added per second, minute, hour or day, continuously (not all at once when the period turns: a
   * daily limit is not reset at midnight): `'10/second'`, `'1000/day'`. Exactly the rate
   * `refillPerSecond: count / seconds` is; from 1e-6 to 1e6 per second.
   */
  refill: Refill;
  refillPerSecond?: undefined;
}

/**
 * A policy as the user writes it: one token bucket (`capacity` and `refillPerSecond`), or several named
 * ones (`limits`), all decided together in one atomic step: a take is allowed only when every limit
 * admits its cost, and then all of them are charged; refused, none is.
 */
export type PolicyConfig = PolicyOptions &
  (
    | ((LimitConfig | RefillLimitConfig) & { limits?: undefined })
    | {
        /**
         * Several limits, by name (/^[A-Za-z0-9_-]{1,32}$/, 1 to 8 of them), e.g. `{ burst: { capacity: 10,
         * refillPerSecond: 10 }, daily: { capacity: 1000, refillPerSecond: 1000 / 86400 } }`. Each keeps the
         * exact continuous refill of a single bucket.
         */
        limits: Record<string, LimitConfig | RefillLimitConfig>;
        capacity?: undefined;
        refillPerSecond?: undefined;
        refill?: undefined;
      }
  );

/** What a policy says besides its limits. */
export interface PolicyOptions {  /**
   * What a decision is when the store fails, times out, is skipped by the open circuit breaker, or the
   * limiter is at maxPendingStoreCalls: `deny`, `allow`, or `local` (decide from an in-process bucket
   * per key with the `local` limit until the store answers again; reason 'local').
   * @default the limiter's `onStoreError` ('deny')
   */
  onStoreError?: FailMode;
  /**
   * The limit each node applies on its own while the store fails, with `onStoreError: 'local'`: both
   * numbers, each at most the policy's own (a policy with several limits names each: `{ limits: { burst:
   * {...}, daily: {...} } }`). @default the policy's capacities and rates divided by the limiter's
   * `expectedNodes` (capacities rounded down)
   */
  local?: LocalLimitConfig | RefillLimitConfig | { limits: Record<string, LocalLimitConfig | RefillLimitConfig> };
  /** Shadow mode: the HTTP layers report the decision but never block. @default false */
  shadow?: boolean;
  /** Per-policy bound on one store call, in ms. @default the limiter's `timeoutMs` */
  timeoutMs?: number;
  /**
   * Token leases for hot keys (opt-in; a policy with one limit only): this node takes up to `tokens`
   * tokens of a key's bucket in one
   * store call and answers takes on that key from them without a store call, refilling in the
   * background at the low-water mark. Never over-admits (every token answered was first taken from the
   * store); other nodes may be refused while tokens sit in a lease: at most nodes × tokens per key.
   * Decisions answered from a lease carry reason 'lease' and this node's view (remaining = tokens left
   * in its lease). Off by default.
   */
  lease?: LeaseConfig;
}

/** A local fallback limit (PolicyConfig.local); its refill may be written as `refill` too (RefillLimitConfig). */
export interface LocalLimitConfig {
  /** An integer from 1 to the policy's capacity. */
  capacity: number;
  /** A number from 1e-6 to the policy's refillPerSecond. */
  refillPerSecond: number;
  refill?: undefined;
}

/** A policy's token lease (opt-in): this node takes up to `tokens` of a hot key's bucket in one store call and answers later takes from them. */
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

/** One validated limit (token bucket) with its exact arithmetic. */
export interface ResolvedLimit {
  /** The limit's name: the policy's own for a policy with one limit. */
  readonly name: string;
  readonly capacity: number;
  readonly refillPerSecond: number;
  /**
   * The bucket's exact arithmetic: the rate as a ratio of integers, refillPerSecond = rateNumerator /
   * rateDenominator, and from it two integers such that one token is `tokenUnits` units and one µs of
   * the store's clock refills `refillUnitsPerUs` units. Every store keeps a bucket as its debt in units
   * (how far below full it is) and the µs of its clock when that was so: integers that a double holds
   * exactly, so no rounding ever gives a token away or takes one.
   */
  readonly rateNumerator: number;
  readonly rateDenominator: number;
  readonly tokenUnits: number;
  readonly refillUnitsPerUs: number;
  /** refillUnitsPerUs * 1000: units refilled per ms. */
  readonly unitsPerMs: number;
  /** capacity * tokenUnits: the debt of an empty bucket. */
  readonly capacityUnits: number;
  /** Ms for one token to refill: 1000 / refillPerSecond (a float: for reports, never for decisions). */
  readonly intervalMs: number;
  /** Ms to refill an empty bucket: capacity * intervalMs (a float: for reports, never for decisions). */
  readonly burstMs: number;
  /** Seconds in the RateLimit-Policy `w` parameter: the time to refill the bucket, rounded up. */
  readonly windowSeconds: number;
}

/**
 * A validated policy. Its limits are `limits`, in the order written; the fields of ResolvedLimit at its
 * top level are its first limit's (the only one, for a policy written with capacity and refillPerSecond).
 */
export interface ResolvedPolicy extends ResolvedLimit {
  readonly name: string;
  readonly onStoreError: FailMode;
  readonly shadow: boolean;
  readonly timeoutMs: number;
  /** One or more limits, decided together: a take is allowed only when every one admits its cost. */
  readonly limits: readonly ResolvedLimit[];
  /** Token leases, when the policy opts in. */
  readonly lease?: LeaseSettings;
  /**
   * With onStoreError 'local': the local limit as a policy of the same name (its own exact numbers),
   * which this node's fallback bucket for each key follows while the store fails.
   */
  readonly local?: ResolvedPolicy;
}

const KNOWN_FIELDS = new Set(['capacity', 'refillPerSecond', 'refill', 'limits', 'onStoreError', 'shadow', 'timeoutMs', 'lease', 'local']);
const LIMIT_FIELDS = new Set(['capacity', 'refillPerSecond', 'refill']);
const LEASE_FIELDS = new Set(['tokens', 'maxAgeMs', 'lowWater']);

export interface PolicyDefaults {
  onStoreError: FailMode;
  timeoutMs: number;
  /** Nodes sharing the store: the default local limit is the policy's divided by this. @default 1 */
  expectedNodes?: number;
}

/** The longest timeoutMs, in ms (a policy's or the limiter's). */
export const MAX_TIMEOUT_MS = 60_000;

export function validateTimeoutMs(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_TIMEOUT_MS) {
    throw new ConfigError(field, `must be an integer from 1 to 60000 (ms), got ${show(value)}`);
  }
  return value;
}

export function validateFailMode(field: string, value: unknown): FailMode {
  if (value !== 'deny' && value !== 'allow' && value !== 'local') {
    throw new ConfigError(field, `must be "deny", "allow" or "local", got ${show(value)}`);
  }
  return value;
}

/** Validates one policy; throws ConfigError naming `policies.<name>.<field>` and the value. */
export function resolvePolicy(name: string, config: unknown, defaults: PolicyDefaults): ResolvedPolicy {
  if (!POLICY_NAME_PATTERN.test(name)) {
    throw new ConfigError(`policies[${JSON.stringify(name.slice(0, 80))}]`, 'name must match /^[A-Za-z0-9_.-]{1,64}$/, not "." or ".."');
  }
  if (name === '__proto__') {
    // Assigning it on a plain object sets the object's prototype instead, so the policy would vanish
    // from every object keyed by policy name (the stats snapshot, the live page's series).
    throw new ConfigError('policies["__proto__"]', 'name must not be "__proto__": policy names are keys of JSON objects (GET /v1/stats)');
  }
  const at = (field: string) => `policies.${name}.${field}`;
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new ConfigError(`policies.${name}`, `must be an object, got ${show(config)}`);
  }
  const c = config as Record<string, unknown>;
  for (const field of Object.keys(c)) {
    if (!KNOWN_FIELDS.has(field)) throw new ConfigError(at(field), 'is not a known field');
  }
  const limits = resolveLimits(name, at, c);
  const onStoreError = c.onStoreError === undefined ? defaults.onStoreError : validateFailMode(at('onStoreError'), c.onStoreError);
  if (c.shadow !== undefined && typeof c.shadow !== 'boolean') {
    throw new ConfigError(at('shadow'), `must be a boolean, got ${show(c.shadow)}`);
  }
  const timeoutMs = c.timeoutMs === undefined ? defaults.timeoutMs : validateTimeoutMs(at('timeoutMs'), c.timeoutMs);
  if (c.lease !== undefined && limits.length > 1) {
    // A grant takes whole tokens of one bucket; with several limits each leased token would have to
    // be a token of every limit, with a cost per limit: refused rather than approximated.
    throw new ConfigError(at('lease'), 'is for a policy with one limit: a policy with several limits decides every take in the store');
  }
  const lease = c.lease === undefined ? undefined : resolveLease(at('lease'), c.lease, limits[0]!.capacity);
  if (c.local !== undefined && onStoreError !== 'local') {
    throw new ConfigError(at('local'), `is used only with onStoreError "local" (this policy's is "${onStoreError}")`);
  }
  const local = onStoreError === 'local' ? resolveLocal(name, localConfig(at('local'), c.local, limits, c.limits !== undefined, defaults.expectedNodes ?? 1), timeoutMs) : undefined;
  return Object.freeze({
    ...limits[0]!,
    name,
    onStoreError,
    shadow: c.shadow === true,
    timeoutMs,
    limits,
    ...(lease ? { lease } : {}),
    ...(local ? { local } : {}),
  });
}

/**
 * The policy's limits: `limits` (named, 1 to MAX_LIMITS) or the one bucket of capacity and
 * refillPerSecond, named after the policy. Errors name `policies.<p>.capacity` for the one bucket and
 * `policies.<p>.limits.<limit>.capacity` for a named limit.
 */
function resolveLimits(policy: string, at: (field: string) => string, c: Record<string, unknown>): ResolvedLimit[] {
  if (c.limits === undefined) return [resolveLimit(policy, at, c.capacity, refillOf(at, c), rateField(c))];
  if (c.capacity !== undefined || c.refillPerSecond !== undefined || c.refill !== undefined) {
    throw new ConfigError(at('limits'), 'replaces capacity and refillPerSecond (or refill): write the policy with one or the other');
  }
  const raw = c.limits;
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ConfigError(at('limits'), `must be an object of named limits, got ${show(raw)}`);
  const names = Object.keys(raw);
  if (names.length === 0 || names.length > MAX_LIMITS) throw new ConfigError(at('limits'), `must name 1 to ${MAX_LIMITS} limits, got ${names.length}`);
  return names.map((limit) => {
    const field = `limits.${limit}`;
    if (!LIMIT_NAME_PATTERN.test(limit)) throw new ConfigError(at(field), 'a limit name must match /^[A-Za-z0-9_-]{1,32}$/');
    const l = (raw as Record<string, unknown>)[limit];
    if (typeof l !== 'object' || l === null || Array.isArray(l)) throw new ConfigError(at(field), `must be an object, got ${show(l)}`);
    for (const f of Object.keys(l)) if (!LIMIT_FIELDS.has(f)) throw new ConfigError(at(`${field}.${f}`), 'is not a known field');
    const limitAt = (f: string) => at(`${field}.${f}`);
    return resolveLimit(limit, limitAt, (l as Record<string, unknown>).capacity, refillOf(limitAt, l as Record<string, unknown>), rateField(l as Record<string, unknown>));
  });
}

/** The field a limit's rate was written in, for its errors. */
const rateField = (limit: Record<string, unknown>) => (limit.refill === undefined ? 'refillPerSecond' : 'refill');

/** One limit, validated, with its exact arithmetic (see ResolvedLimit). */
function resolveLimit(name: string, at: (field: string) => string, capacity: unknown, refillPerSecond: unknown, written: string): ResolvedLimit {
  if (typeof capacity !== 'number' || !Number.isInteger(capacity) || capacity < 1 || capacity > MAX_CAPACITY) {
    throw new ConfigError(at('capacity'), `must be an integer from 1 to 1e9, got ${show(capacity)}`);
  }
  if (
    typeof refillPerSecond !== 'number' ||
    !Number.isFinite(refillPerSecond) ||
    refillPerSecond < MIN_REFILL_PER_SECOND ||
    refillPerSecond > MAX_REFILL_PER_SECOND
  ) {
    throw new ConfigError(at(written), `must be a finite number from 1e-6 to 1e6, got ${show(refillPerSecond)}`);
  }
  const exact = exactRate(at(written), refillPerSecond, capacity);
  const intervalMs = 1000 / exact.refillPerSecond;
  const burstMs = capacity * intervalMs;
  return Object.freeze({
    name,
    capacity,
    refillPerSecond: exact.refillPerSecond,
    rateNumerator: exact.numerator,
    rateDenominator: exact.denominator,
    tokenUnits: exact.tokenUnits,
    refillUnitsPerUs: exact.refillUnitsPerUs,
    unitsPerMs: exact.refillUnitsPerUs * 1000,
    capacityUnits: capacity * exact.tokenUnits,
    intervalMs,
    burstMs,
    windowSeconds: Math.max(1, Math.ceil(burstMs / 1000 - 1e-9)),
  });
}

/** The local limits as a policy of the same name; an error names `policies.<p>.local.<field>`. */
function resolveLocal(name: string, config: PolicyConfig, timeoutMs: number): ResolvedPolicy {
  try {
    return resolvePolicy(name, config, { onStoreError: 'deny', timeoutMs });
  } catch (err) {
    const prefix = `policies.${name}.`;
    if (err instanceof ConfigError && err.field.startsWith(prefix)) {
      throw new ConfigError(`${prefix}local.${err.field.slice(prefix.length)}`, err.message.replace(/^\[edge-limiter\] invalid config: \S+ /, ''));
    }
    throw err;
  }
}

/**
 * The local limits of a policy with onStoreError 'local', as a policy config of the same shape: the
 * `local` block's numbers, each at most the policy's, or by default the policy's divided by
 * expectedNodes, so that the nodes together stay near the policy's limits during an outage.
 */
function localConfig(field: string, value: unknown, limits: readonly ResolvedLimit[], named: boolean, expectedNodes: number): PolicyConfig {
  const divided = (l: ResolvedLimit, f: string): LocalLimitConfig => {
    const local = { capacity: Math.floor(l.capacity / expectedNodes), refillPerSecond: l.refillPerSecond / expectedNodes };
    if (local.capacity < 1 || local.refillPerSecond < MIN_REFILL_PER_SECOND) {
      throw new ConfigError(f, `is needed: the default (the policy's numbers divided by expectedNodes = ${expectedNodes}) is below 1 token or 1e-6 per second`);
    }
    return local;
  };
  if (!named) {
    const local = value === undefined ? divided(limits[0]!, field) : localLimit(field, value, limits[0]!);
    return local;
  }
  if (value === undefined) return { limits: Object.fromEntries(limits.map((l) => [l.name, divided(l, field)])) };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new ConfigError(field, `must be an object, got ${show(value)}`);
  const v = value as Record<string, unknown>;
  for (const f of Object.keys(v)) if (f !== 'limits') throw new ConfigError(`${field}.${f}`, 'is not a known field (a policy with several limits names its local ones in `limits`)');
  const given = v.limits;
  if (typeof given !== 'object' || given === null || Array.isArray(given)) throw new ConfigError(`${field}.limits`, `must be an object naming each of the policy's limits, got ${show(given)}`);
  for (const name of Object.keys(given)) {
    if (!limits.some((l) => l.name === name)) throw new ConfigError(`${field}.limits.${name}`, 'names no limit of this policy');
  }
  return {
    limits: Object.fromEntries(
      limits.map((l) => {
        const f = `${field}.limits.${l.name}`;
        if (!Object.hasOwn(given, l.name)) throw new ConfigError(f, 'is needed: name a local limit for every limit of the policy');
        return [l.name, localLimit(f, (given as Record<string, unknown>)[l.name], l)];
      }),
    ),
  };
}

/** One local limit, both numbers given, each at most the limit's own. */
function localLimit(field: string, value: unknown, limit: ResolvedLimit): LocalLimitConfig {
  const { capacity, refillPerSecond } = limit;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new ConfigError(field, `must be an object, got ${show(value)}`);
  const l = value as Record<string, unknown>;
  for (const f of Object.keys(l)) if (!LIMIT_FIELDS.has(f)) throw new ConfigError(`${field}.${f}`, 'is not a known field');
  if (typeof l.capacity !== 'number' || !Number.isInteger(l.capacity) || l.capacity < 1 || l.capacity > capacity) {
    throw new ConfigError(`${field}.capacity`, `must be an integer from 1 to the policy's capacity (${capacity}), got ${show(l.capacity)}`);
  }
  const rate = refillOf((f) => `${field}.${f}`, l);
  if (typeof rate !== 'number' || !Number.isFinite(rate) || rate < MIN_REFILL_PER_SECOND || rate > refillPerSecond) {
    const written = rateField(l);
    throw new ConfigError(`${field}.${written}`, `must be a number from 1e-6 to the policy's refillPerSecond (${refillPerSecond}), got ${show(l[written])}`);
  }
  return { capacity: l.capacity, refillPerSecond: rate };
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
