// Reads the runtime configuration from environment variables (the same names on Workers, Lambda and
// Node). Pure: takes a plain record, returns a validated config or throws a ConfigError naming the
// variable and field. Never echoes secret values (tokens, URLs with credentials).
import { ConfigError } from '../../src/errors.js';
import type { PolicyConfig } from '../../src/core/policy.js';
import type { CircuitBreakerOptions } from '../../src/limiter/breaker.js';
import { parseCidr } from '../../src/http/ip.js';
import { parsePermitTokens, type PermitToken } from '../../src/http/auth.js';
import { DEFAULT_TOP_KEYS, MAX_TOP_KEYS } from '../../src/limiter/decision-stats.js';

export type StoreKind = 'memory' | 'redis' | 'upstash' | 'mongodb' | 'durable-object';

export interface AppConfig {
  store:
    | { kind: 'memory' }
    | { kind: 'redis'; url: string; clientClock: boolean }
    | { kind: 'upstash'; url: string; token: string; clientClock: boolean }
    | { kind: 'mongodb'; uri: string; db: string; collection: string }
    /** Workers only: the LIMITER_DO binding of RateLimiterObject; LIMITER_DO_SHARDS hashes keys onto that many objects. */
    | { kind: 'durable-object'; shards?: number };
  policies: Record<string, PolicyConfig>;
  /** PERMIT_TOKENS, checked: plain tokens (every right on every policy) or scoped ones. */
  tokens: (string | PermitToken)[];
  /**
   * Limiter options beyond the policies (LIMITER_CIRCUIT_BREAKER, LIMITER_MAX_PENDING_STORE_CALLS,
   * LIMITER_EXPECTED_NODES, LIMITER_IDEMPOTENCY_WINDOW_MS, LIMITER_POLICY_REFRESH_MS).
   */
  limiter: { circuitBreaker?: CircuitBreakerOptions | false; maxPendingStoreCalls?: number; expectedNodes?: number; idempotencyWindowMs?: number; policyRefreshMs?: number };
  gate?: {
    origin: string;
    policy: string;
    key: 'ip' | { header: string };
    /** GATE_TIMEOUT_MS: the wait for the origin's response head. */
    timeoutMs: number;
    /** GATE_TRUSTED_PROXIES: CIDR ranges whose X-Forwarded-For entries are believed. */
    trustedProxies: string[];
    /** GATE_IPV6_SUBNET: IPv6 clients share a bucket per this prefix (false: per address). */
    ipv6Subnet: number | false;
    /** GATE_TRUST_FORWARDED_HOST=true: the trusted proxies set X-Forwarded-Host (else it is Host). */
    trustForwardedHost?: true;
    /** GATE_MAX_BODY_BYTES: larger request bodies get 413 (unset: no limit). */
    maxBodyBytes?: number;
  };
  /** LIMITER_TOP_KEYS: refused keys kept per policy for /v1/stats (0: none, only the counters). */
  stats: { topKeys: number };
}

export type EnvRecord = Record<string, unknown>;

/** The policies used when LIMITER_POLICIES is unset: enough to try the endpoint. */
export const DEFAULT_POLICIES: Record<string, PolicyConfig> = { default: { capacity: 10, refillPerSecond: 1 } };

function str(env: EnvRecord, name: string): string | undefined {
  const v = env[name];
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string') throw new ConfigError(name, 'must be a string');
  return v;
}

function required(env: EnvRecord, name: string, why: string): string {
  const v = str(env, name);
  if (!v) throw new ConfigError(name, `is required ${why}`);
  return v;
}

/** An Upstash variable: required, and no whitespace at either end nor a line break (a secret pasted with its newline). */
function spaceless(env: EnvRecord, name: string): string {
  const v = required(env, name, 'for LIMITER_STORE=upstash');
  if (/^\s|\s$|[\r\n]/.test(v)) throw new ConfigError(name, 'has whitespace at an end or a line break (a secret pasted with its newline?)');
  return v;
}

function checkUrl(name: string, value: string, schemes: string[]): string {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    // The value may hold credentials: say what is wrong without repeating it.
    throw new ConfigError(name, 'is not a valid URL');
  }
  if (!schemes.includes(u.protocol)) throw new ConfigError(name, `must use ${schemes.join(' or ')} (got ${u.protocol})`);
  return value;
}

/**
 * LIMITER_CLIENT_CLOCK=true: the explicit opt-in for Redis servers that refuse TIME inside scripts.
 * Decisions then use each caller's clock, so skewed callers disagree by their skew.
 */
function clientClock(env: EnvRecord): boolean {
  const v = str(env, 'LIMITER_CLIENT_CLOCK');
  if (v === undefined || v === 'false') return false;
  if (v === 'true') return true;
  throw new ConfigError('LIMITER_CLIENT_CLOCK', `must be "true" or "false", got ${JSON.stringify(v.slice(0, 20))}`);
}

function boolean(env: EnvRecord, name: string): boolean {
  const v = str(env, name);
  if (v === undefined || v === 'false') return false;
  if (v === 'true') return true;
  throw new ConfigError(name, `must be "true" or "false", got ${JSON.stringify(v.slice(0, 20))}`);
}

function integer(env: EnvRecord, name: string, min: number, max: number): number | undefined {
  const v = str(env, name);
  if (v === undefined) return undefined;
  const n = /^\d+$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new ConfigError(name, `must be an integer from ${min} to ${max}, got ${JSON.stringify(v.slice(0, 20))}`);
  return n;
}

/** LIMITER_CIRCUIT_BREAKER: `off`, or `<failures>/<cooldownMs>` such as `5/500` (the default). */
function circuitBreaker(env: EnvRecord): CircuitBreakerOptions | false | undefined {
  const v = str(env, 'LIMITER_CIRCUIT_BREAKER');
  if (v === undefined) return undefined;
  if (v === 'off') return false;
  const m = /^(\d{1,6})\/(\d{1,7})$/.exec(v);
  if (!m || Number(m[1]) < 1) {
    throw new ConfigError('LIMITER_CIRCUIT_BREAKER', `must be "off" or "<failures>/<cooldownMs>" such as "5/500", got ${JSON.stringify(v.slice(0, 20))}`);
  }
  return { failureThreshold: Number(m[1]), cooldownMs: Number(m[2]) };
}

export function loadConfig(env: EnvRecord): AppConfig {
  const explicit = str(env, 'LIMITER_STORE');
  let kind: StoreKind;
  if (explicit) {
    if (!['memory', 'redis', 'upstash', 'mongodb', 'durable-object'].includes(explicit)) {
      throw new ConfigError('LIMITER_STORE', `must be memory, redis, upstash, mongodb or durable-object, got ${JSON.stringify(explicit.slice(0, 40))}`);
    }
    kind = explicit as StoreKind;
  } else if (str(env, 'UPSTASH_REDIS_REST_URL')) kind = 'upstash';
  else if (str(env, 'REDIS_URL')) kind = 'redis';
  else if (str(env, 'MONGODB_URI')) kind = 'mongodb';
  else kind = 'memory';

  let store: AppConfig['store'];
  switch (kind) {
    case 'memory':
      store = { kind };
      break;
    case 'redis':
      store = { kind, url: checkUrl('REDIS_URL', required(env, 'REDIS_URL', 'for LIMITER_STORE=redis'), ['redis:', 'rediss:']), clientClock: clientClock(env) };
      break;
    case 'upstash':
      store = {
        kind,
        url: checkUrl('UPSTASH_REDIS_REST_URL', spaceless(env, 'UPSTASH_REDIS_REST_URL'), ['https:', 'http:']),
        token: spaceless(env, 'UPSTASH_REDIS_REST_TOKEN'),
        clientClock: clientClock(env),
      };
      break;
    case 'mongodb':
      store = {
        kind,
        uri: checkUrl('MONGODB_URI', required(env, 'MONGODB_URI', 'for LIMITER_STORE=mongodb'), ['mongodb:', 'mongodb+srv:']),
        db: str(env, 'MONGODB_DB') ?? 'edge_limiter',
        collection: str(env, 'MONGODB_COLLECTION') ?? 'token_buckets',
      };
      break;
    case 'durable-object': {
      const shards = str(env, 'LIMITER_DO_SHARDS');
      if (shards !== undefined && (!/^[1-9]\d{0,4}$/.test(shards) || Number(shards) > 65536)) {
        throw new ConfigError('LIMITER_DO_SHARDS', `must be an integer from 1 to 65536, got ${JSON.stringify(shards.slice(0, 20))}`);
      }
      store = shards === undefined ? { kind } : { kind, shards: Number(shards) };
      break;
    }
  }

  let policies = DEFAULT_POLICIES;
  const rawPolicies = env.LIMITER_POLICIES;
  if (rawPolicies !== undefined && rawPolicies !== '') {
    let parsed: unknown = rawPolicies;
    if (typeof rawPolicies === 'string') {
      try {
        parsed = JSON.parse(rawPolicies);
      } catch (e) {
        throw new ConfigError('LIMITER_POLICIES', `is not valid JSON (${(e as Error).message})`);
      }
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new ConfigError('LIMITER_POLICIES', 'must be a JSON object of named policies');
    }
    // Names are checked against the object's own keys only (GATE_POLICY=toString is no policy).
    if (Object.keys(parsed).length === 0) throw new ConfigError('LIMITER_POLICIES', 'must define at least one policy');
    policies = parsed as Record<string, PolicyConfig>;
  }

  const tokens = parsePermitTokens(env.PERMIT_TOKENS, Object.keys(policies));

  let gate: AppConfig['gate'];
  const origin = str(env, 'GATE_ORIGIN');
  if (origin) {
    checkUrl('GATE_ORIGIN', origin, ['http:', 'https:']);
    const policy = str(env, 'GATE_POLICY') ?? Object.keys(policies)[0]!;
    if (!Object.hasOwn(policies, policy)) throw new ConfigError('GATE_POLICY', `names no policy in LIMITER_POLICIES: ${JSON.stringify(policy.slice(0, 64))}`);
    const rawKey = str(env, 'GATE_KEY') ?? 'ip';
    let key: 'ip' | { header: string };
    if (rawKey === 'ip') key = 'ip';
    else if (/^header:[A-Za-z0-9-]{1,64}$/.test(rawKey)) key = { header: rawKey.slice('header:'.length).toLowerCase() };
    else throw new ConfigError('GATE_KEY', `must be "ip" or "header:<name>", got ${JSON.stringify(rawKey.slice(0, 80))}`);
    const trustedProxies = (str(env, 'GATE_TRUSTED_PROXIES') ?? '').split(',').map((r) => r.trim()).filter(Boolean);
    for (const range of trustedProxies) {
      try {
        parseCidr(range);
      } catch (err) {
        throw new ConfigError('GATE_TRUSTED_PROXIES', `must be a comma-separated list of IP addresses or CIDR ranges: ${(err as Error).message}`);
      }
    }
    const subnet = str(env, 'GATE_IPV6_SUBNET') === 'off' ? false : integer(env, 'GATE_IPV6_SUBNET', 1, 128) ?? 64;
    gate = {
      origin: origin.replace(/\/$/, ''),
      policy,
      key,
      timeoutMs: integer(env, 'GATE_TIMEOUT_MS', 1, 600_000) ?? 30_000,
      trustedProxies,
      ipv6Subnet: subnet,
    };
    if (boolean(env, 'GATE_TRUST_FORWARDED_HOST')) {
      if (trustedProxies.length === 0) throw new ConfigError('GATE_TRUST_FORWARDED_HOST', 'needs GATE_TRUSTED_PROXIES: only trusted proxies can say which host the client asked for');
      gate.trustForwardedHost = true;
    }
    const maxBodyBytes = integer(env, 'GATE_MAX_BODY_BYTES', 0, Number.MAX_SAFE_INTEGER);
    if (maxBodyBytes !== undefined) gate.maxBodyBytes = maxBodyBytes;
  }
  const limiter: AppConfig['limiter'] = {};
  const breaker = circuitBreaker(env);
  if (breaker !== undefined) limiter.circuitBreaker = breaker;
  const maxPending = integer(env, 'LIMITER_MAX_PENDING_STORE_CALLS', 1, 1_000_000);
  if (maxPending !== undefined) limiter.maxPendingStoreCalls = maxPending;
  // The default local limit of onStoreError "local" policies is theirs divided by this.
  const expectedNodes = integer(env, 'LIMITER_EXPECTED_NODES', 1, 100_000);
  if (expectedNodes !== undefined) limiter.expectedNodes = expectedNodes;
  const idempotencyWindowMs = integer(env, 'LIMITER_IDEMPOTENCY_WINDOW_MS', 1000, 86_400_000);
  if (idempotencyWindowMs !== undefined) limiter.idempotencyWindowMs = idempotencyWindowMs;
  // How old a reading of a policy-wide change of limits a decision may use (the propagation bound).
  const policyRefreshMs = integer(env, 'LIMITER_POLICY_REFRESH_MS', 10, 60_000);
  if (policyRefreshMs !== undefined) limiter.policyRefreshMs = policyRefreshMs;
  const stats = { topKeys: integer(env, 'LIMITER_TOP_KEYS', 0, MAX_TOP_KEYS) ?? DEFAULT_TOP_KEYS };
  return { store, policies, tokens, limiter, gate, stats };
}

/**
 * The longest store call any policy allows, in ms: store clients are built with per-command bounds a
 * little above it, so a call the limiter has given up on is also closed by the client.
 */
export function storeTimeoutMs(config: AppConfig): number {
  let ms = 0;
  for (const p of Object.values(config.policies)) ms = Math.max(ms, (p && typeof p.timeoutMs === 'number' && p.timeoutMs) || 1000);
  return ms || 1000;
}

/** Prefixes a policy ConfigError with the variable it came from, so the message names LIMITER_POLICIES. */
export function inEnv(err: unknown): unknown {
  if (err instanceof ConfigError && err.field.startsWith('policies')) {
    return new ConfigError(`LIMITER_POLICIES${err.field.slice('policies'.length)}`, err.message.replace(/^\[edge-limiter\] invalid config: \S+ /, ''));
  }
  return err;
}
