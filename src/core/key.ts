// Request-argument checks shared by the library and the HTTP layers. Pure.
import { InvalidInputError } from '../errors.js';
import type { ResolvedPolicy } from './policy.js';

/**
 * What a take costs: a number charges every limit of the policy that many tokens; an object charges
 * each limit it names its own cost (`{ requests: 1, tokens: 1200 }`), and a limit it does not name 0.
 */
export type Cost = number | Readonly<Record<string, number>>;

export const MAX_KEY_BYTES = 512;
const MAX_KEY_BYTES_FAST = Math.floor(MAX_KEY_BYTES / 3);
/** The longest wait `take` may reserve for, in ms (one hour). The permit endpoint allows less. */
export const MAX_WAIT_MS = 3_600_000;
/** The longest wait the permit endpoint reserves for, in ms (its clients ask for at most this). */
export const MAX_PERMIT_WAIT_MS = 300_000;

/** UTF-8 length of a well-formed string, without allocating. */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

/**
 * Whether assertKey would accept `key` without counting bytes: 1 to 170 UTF-16 units (at most 3 bytes of
 * UTF-8 each), well formed. The check of a decision's hot path; any other key goes through assertKey.
 */
export function isShortKey(key: unknown): key is string {
  return typeof key === 'string' && key.length !== 0 && key.length <= MAX_KEY_BYTES_FAST && key.isWellFormed();
}

/** A key is any well-formed UTF-8 string of 1 to 512 bytes. Anything else is an InvalidInputError. */
export function assertKey(key: unknown): asserts key is string {
  if (typeof key !== 'string') throw new InvalidInputError('key', `must be a string, got ${key === null ? 'null' : typeof key}`);
  if (key.length === 0) throw new InvalidInputError('key', 'must not be empty');
  // Lone surrogates have no UTF-8 form; two different such keys would collide once encoded.
  if (!key.isWellFormed()) throw new InvalidInputError('key', 'must be well-formed Unicode (no lone surrogates)');
  // A UTF-16 code unit is at most 3 UTF-8 bytes, so keys of up to 170 units need no counting.
  if (key.length > MAX_KEY_BYTES_FAST && (key.length > MAX_KEY_BYTES || utf8Length(key) > MAX_KEY_BYTES)) {
    throw new InvalidInputError('key', `must be at most ${MAX_KEY_BYTES} bytes of UTF-8`);
  }
}

/** The smallest capacity of the policy's limits: the most a plain-number cost may be. */
function smallestCapacity(policy: ResolvedPolicy): number {
  let c = policy.capacity;
  for (const l of policy.limits) c = Math.min(c, l.capacity);
  return c;
}

/**
 * A take's cost, checked against the policy: a number stays a number (every limit pays it: 1 to the
 * smallest capacity); an object becomes the cost of each limit in the policy's order (each an integer
 * from 0 to that limit's capacity, at least one above 0, naming only the policy's limits). Throws an
 * InvalidInputError naming `cost` or `cost.<limit>`.
 */
export function resolveCost(policy: ResolvedPolicy, cost: unknown): number | number[] {
  if (typeof cost === 'number') {
    // Below 1 is said without the capacity, so that a client (clients/python) can say it word for word.
    if (!Number.isInteger(cost) || cost < 1) throw new InvalidInputError('cost', `must be an integer of at least 1, got ${String(cost)}`);
    const most = smallestCapacity(policy);
    if (cost > most) {
      const what = policy.limits.length === 1 ? 'the policy capacity' : 'the smallest capacity of the policy\'s limits,';
      throw new InvalidInputError('cost', `must be at most ${what} ${most}, got ${String(cost)}`);
    }
    return cost;
  }
  const costs = costObject(policy, cost, 'cost');
  policy.limits.forEach((l, i) => {
    const c = costs[i]!;
    if (!Number.isInteger(c) || c < 0) throw new InvalidInputError(`cost.${l.name}`, `must be an integer of at least 0, got ${String(c)}`);
    if (c > l.capacity) throw new InvalidInputError(`cost.${l.name}`, `must be at most the limit's capacity ${l.capacity}, got ${String(c)}`);
  });
  if (costs.every((c) => c === 0)) throw new InvalidInputError('cost', 'must charge at least one limit at least 1 token');
  return costs;
}

/**
 * An adjustment's cost: like a take's, but each part may be negative (a refund) and up to 1e9 in size;
 * not all of it 0. Throws an InvalidInputError naming `cost` or `cost.<limit>`.
 */
export function resolveAdjustment(policy: ResolvedPolicy, cost: unknown): number | number[] {
  const check = (field: string, c: unknown) => {
    if (typeof c !== 'number' || !Number.isInteger(c) || Math.abs(c) > MAX_ADJUST_TOKENS) {
      throw new InvalidInputError(field, `must be an integer from -1e9 to 1e9 (below 0 a refund), got ${String(c)}`);
    }
  };
  if (typeof cost === 'number') {
    check('cost', cost);
    if (cost === 0) throw new InvalidInputError('cost', 'must not be 0: an adjustment refunds (below 0) or charges (above 0)');
    return cost;
  }
  const costs = costObject(policy, cost, 'cost');
  policy.limits.forEach((l, i) => check(`cost.${l.name}`, costs[i]));
  if (costs.every((c) => c === 0)) throw new InvalidInputError('cost', 'must not be 0 on every limit: an adjustment refunds (below 0) or charges (above 0)');
  return costs;
}

/**
 * A settlement's actual cost: an integer from 0 to 1e9 per limit (0: the work cost nothing, and the whole
 * charge goes back), as one number for every limit or an object of tokens per limit (0 where it names
 * none). Never below 0: a settlement refunds at most what its charge took.
 */
export function resolveSettlement(policy: ResolvedPolicy, cost: unknown): number | number[] {
  const check = (field: string, c: unknown) => {
    if (typeof c !== 'number' || !Number.isInteger(c) || c < 0 || c > MAX_ADJUST_TOKENS) {
      throw new InvalidInputError(field, `must be an integer from 0 to 1e9 (the actual cost: a settlement refunds at most what its charge took), got ${String(c)}`);
    }
  };
  if (typeof cost === 'number') {
    check('cost', cost);
    return cost;
  }
  const costs = costObject(policy, cost, 'cost');
  policy.limits.forEach((l, i) => check(`cost.${l.name}`, costs[i]));
  return costs;
}

/** The most tokens one adjustment may refund or charge per limit. */
export const MAX_ADJUST_TOKENS = 1e9;

/** A cost object's values in the policy's limit order (0 where it names none); refuses unknown names. */
function costObject(policy: ResolvedPolicy, cost: unknown, field: string): number[] {
  if (typeof cost !== 'object' || cost === null || Array.isArray(cost)) {
    throw new InvalidInputError(field, `must be a number of tokens, or an object of tokens per limit, got ${cost === null ? 'null' : Array.isArray(cost) ? 'an array' : typeof cost}`);
  }
  const c = cost as Record<string, unknown>;
  for (const name of Object.keys(c)) {
    if (!policy.limits.some((l) => l.name === name)) {
      throw new InvalidInputError(`${field}.${name.slice(0, 40)}`, `names no limit of policy ${policy.name} (its limits: ${policy.limits.map((l) => l.name).join(', ')})`);
    }
  }
  return policy.limits.map((l) => (Object.hasOwn(c, l.name) ? (c[l.name] as number) : 0));
}

/** The longest operation id (Idempotency-Key), in bytes of UTF-8. */
export const MAX_IDEMPOTENCY_KEY_BYTES = 256;

/**
 * An idempotency key: 1 to 256 printable ASCII characters (space to `~`), what an HTTP Structured Field
 * String (the Idempotency-Key header) can carry, or an InvalidInputError naming `field`.
 */
export function assertIdempotencyKey(value: unknown, field = 'idempotencyKey'): asserts value is string {
  if (typeof value !== 'string' || !/^[\x20-\x7e]{1,256}$/.test(value)) {
    const got = typeof value !== 'string' ? typeof value : value.length === 0 || value.length > MAX_IDEMPOTENCY_KEY_BYTES ? `${value.length} characters` : 'a character outside space to ~';
    throw new InvalidInputError(field, `must be 1 to ${MAX_IDEMPOTENCY_KEY_BYTES} printable ASCII characters (space to ~), got ${got}`);
  }
}

export function assertWaitMs(field: string, value: unknown, max: number = MAX_WAIT_MS): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > max) {
    throw new InvalidInputError(field, `must be an integer from 0 to ${max} (ms), got ${String(value)}`);
  }
}

// Keys as Map keys, for the in-process stores (V8's strings).

/**
 * V8 makes no rope (a concatenation not yet copied into one string) and no slice of another string of
 * fewer than 13 characters: a shorter string holds its own characters.
 */
export const ROPE_MIN_LENGTH = 13;

/**
 * The key as a flat string. One of 13 characters or more built by concatenation ({prefix}{policy}:{key})
 * is a rope in V8, and a Map lookup by a rope costs ~150 ns more than by a flat string (hashing it and
 * comparing it go the slow way). trim() flattens it in place and returns it; a key that trim would
 * change is kept as it is, so the key is always the same characters.
 */
export function flattened(key: string): string {
  const flat = key.trim();
  return flat.length === key.length ? flat : key;
}

/**
 * The key's characters in a string that holds them itself, for a key a store keeps: a slice of a larger
 * string (a request's header block, its body) must not keep that string alive.
 */
export function ownCopy(key: string): string {
  if (key.length < ROPE_MIN_LENGTH) return key;
  // A rope of its characters, which trim() copies into a new flat string (see flattened)...
  const rope = key.slice(0, 1) + key.slice(1);
  const flat = rope.trim();
  if (flat.length === rope.length) return flat;
  // ...unless an end is whitespace, which trim() would cut: then copied between two characters that
  // are not, and sliced out of that copy (which is all the slice holds).
  return `!${key}!`.trim().slice(1, -1);
}
