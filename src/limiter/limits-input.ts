// Runtime limits as a caller writes them (setLimits, setPolicyLimits): validated by the policy's own
// rules (resolvePolicy), so a limit that could not be configured cannot be set either, and resolved to
// the numbers a store holds. Also the way back, from a store's numbers to what a caller reads. Pure.
import type { LimitNumbers } from '../core/decision.js';
import type { OverrideLimit } from '../core/override-types.js';
import { resolvePolicy, type LimitConfig, type RefillLimitConfig, type ResolvedLimit, type ResolvedPolicy } from '../core/policy.js';
import { ConfigError, InvalidInputError, show } from '../errors.js';

/**
 * New numbers for a policy's limits, written as the policy's are: `{ capacity, refillPerSecond }` (or
 * `refill: '1000/day'`) for a policy of one limit; `{ limits: { <name>: { capacity, refill } } }` for a
 * policy with several, naming some or all of them (a limit not named keeps the policy's numbers).
 */
export type LimitsInput = LimitConfig | RefillLimitConfig | { limits: Record<string, LimitConfig | RefillLimitConfig> };

export type { LimitNumbers };

const TOP_FIELDS = new Set(['capacity', 'refillPerSecond', 'refill', 'limits']);
const DEFAULTS = { onStoreError: 'deny', timeoutMs: 1000 } as const;

/** One limit resolved as a policy's would be; a ConfigError becomes an InvalidInputError naming `field`.<sub-field>. */
function resolveOne(policy: string, config: unknown, field: string): ResolvedLimit {
  if (typeof config !== 'object' || config === null || Array.isArray(config)) throw new InvalidInputError(field || 'limits', `must be an object, got ${show(config)}`);
  for (const f of Object.keys(config)) if (f !== 'capacity' && f !== 'refillPerSecond' && f !== 'refill') throw new InvalidInputError(field ? `${field}.${f}` : f, 'is not a known field (capacity, and refillPerSecond or refill)');
  try {
    return resolvePolicy(policy, config, DEFAULTS).limits[0]!;
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    const sub = err.field.slice(`policies.${policy}.`.length);
    throw new InvalidInputError(field ? `${field}.${sub}` : sub, err.message.replace(/^\[edge-limiter\] invalid config: \S+ /, ''));
  }
}

/**
 * The limits `input` sets on `policy`, every limit in the policy's order (those not named: the policy's
 * own). Throws an InvalidInputError naming the field (`capacity`, `limits.day.refill`) as the body
 * writes it.
 */
export function resolveLimitsInput(policy: ResolvedPolicy, input: unknown): ResolvedLimit[] {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw new InvalidInputError('limits', `must be an object, got ${show(input)}`);
  const c = input as Record<string, unknown>;
  for (const f of Object.keys(c)) if (!TOP_FIELDS.has(f)) throw new InvalidInputError(f.slice(0, 64), 'is not a known field (capacity and refillPerSecond or refill; or limits)');
  if (policy.limits.length === 1) {
    if (c.limits !== undefined) throw new InvalidInputError('limits', `policy "${policy.name}" has one limit: write capacity and refillPerSecond (or refill)`);
    const l = resolveOne(policy.name, c, '');
    return [{ ...l, name: policy.limits[0]!.name }];
  }
  if (c.limits === undefined || c.capacity !== undefined || c.refillPerSecond !== undefined || c.refill !== undefined) {
    throw new InvalidInputError('limits', `policy "${policy.name}" has several limits (${policy.limits.map((l) => l.name).join(', ')}): name them, { limits: { <name>: { capacity, refillPerSecond } } }`);
  }
  const given = c.limits;
  if (typeof given !== 'object' || given === null || Array.isArray(given) || Object.keys(given).length === 0) {
    throw new InvalidInputError('limits', 'must be an object naming one or more of the policy\'s limits');
  }
  for (const name of Object.keys(given)) {
    if (!policy.limits.some((l) => l.name === name)) throw new InvalidInputError(`limits.${name.slice(0, 64)}`, `names no limit of policy "${policy.name}"`);
  }
  return policy.limits.map((l) => {
    if (!Object.hasOwn(given, l.name)) return l;
    return { ...resolveOne(policy.name, (given as Record<string, unknown>)[l.name], `limits.${l.name}`), name: l.name };
  });
}

/** Numbers a store holds, as a caller reads them, named after the policy's limits. */
export function toNumbers(policy: ResolvedPolicy, limits?: readonly OverrideLimit[]): LimitNumbers[] {
  return policy.limits.map((l, i) => {
    const o = limits?.[i];
    if (!o) return { name: l.name, capacity: l.capacity, refillPerSecond: l.refillPerSecond };
    return { name: l.name, capacity: Math.floor(o.capacityUnits / o.tokenUnits), refillPerSecond: (o.refillUnitsPerUs * 1_000_000) / o.tokenUnits };
  });
}
