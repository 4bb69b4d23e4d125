// createLimiter's options, validated once (a ConfigError naming the field), with the per-policy entries
// every decision looks up (./entry.ts). Pure: no store call, no clock.
import { resolvePolicy, validateFailMode, validateTimeoutMs, type ResolvedPolicy } from '../core/policy.js';
import { ConfigError } from '../errors.js';
import { newEntry, type PolicyEntry } from './entry.js';
import { MAX_POLICY_REFRESH_MS, POLICY_HOLD_MS } from './policy-wide.js';
import type { LimiterOptions } from './types.js';

/** The options with their defaults, validated. */
export interface Settings {
  policies: Map<string, ResolvedPolicy>;
  /**
   * Per policy, what every decision needs, so that a decision makes one lookup: the policy,
   * `{prefix}{policy}:` (a storage key is then one concatenation) and the step arguments of the common
   * take (cost 1, no wait), which stores only read.
   */
  entries: Map<string, PolicyEntry>;
  idempotencyWindowMs: number;
  maxPending: number;
  /** 0: no deny cache. */
  denyCacheMax: number;
  leaseMaxKeys: number;
  policyRefreshMs: number;
}

function integerIn(field: string, value: number, min: number, max: number, what = `an integer from ${min} to ${max}`): number {
  if (!Number.isInteger(value) || value < min || value > max) throw new ConfigError(field, `must be ${what}, got ${String(value)}`);
  return value;
}

export function resolveSettings(options: LimiterOptions): Settings {
  const prefix = options.prefix ?? 'el:';
  // No NUL: stores name an idempotency record by a key that starts with NUL, which no bucket key may.
  if (typeof prefix !== 'string' || prefix.length > 64 || prefix.includes('\u0000')) throw new ConfigError('prefix', 'must be a string of at most 64 characters, without NUL');
  const timeoutMs = options.timeoutMs === undefined ? 1000 : validateTimeoutMs('timeoutMs', options.timeoutMs);
  const onStoreError = options.onStoreError === undefined ? 'deny' : validateFailMode('onStoreError', options.onStoreError);
  const expectedNodes = integerIn('expectedNodes', options.expectedNodes ?? 1, 1, 100_000);
  if (!options.policies || typeof options.policies !== 'object') throw new ConfigError('policies', 'must be an object of named policies');
  const policyRefreshMs = integerIn('policyRefreshMs', options.policyRefreshMs ?? 1000, 10, MAX_POLICY_REFRESH_MS, `an integer from 10 to ${MAX_POLICY_REFRESH_MS} (ms)`);
  const policies = new Map<string, ResolvedPolicy>();
  const entries = new Map<string, PolicyEntry>();
  for (const [name, config] of Object.entries(options.policies)) {
    const policy = resolvePolicy(name, config, { onStoreError, timeoutMs, expectedNodes });
    policies.set(name, policy);
    // A key's copy of a policy-wide change or marker is held as long as any node may decide with an
    // older reading: the same on every node, whatever its own settings (POLICY_HOLD_MS).
    entries.set(name, newEntry(policy, prefix, POLICY_HOLD_MS));
  }
  if (policies.size === 0) throw new ConfigError('policies', 'must define at least one policy');
  const idempotencyWindowMs = integerIn('idempotencyWindowMs', options.idempotencyWindowMs ?? 300_000, 1000, 86_400_000, 'an integer from 1000 to 86400000 (ms)');
  const maxPending = integerIn('maxPendingStoreCalls', options.maxPendingStoreCalls ?? 1024, 1, Infinity, 'a positive integer');
  const denyCacheMax = options.denyCache ? (typeof options.denyCache === 'object' ? options.denyCache.maxKeys ?? 10_000 : 10_000) : 0;
  integerIn('denyCache.maxKeys', denyCacheMax, 0, Infinity, 'a positive integer');
  const leaseMaxKeys = integerIn('leases.maxKeys', options.leases?.maxKeys ?? 10_000, 1, Infinity, 'a positive integer');
  return { policies, entries, idempotencyWindowMs, maxPending, denyCacheMax, leaseMaxKeys, policyRefreshMs };
}
