// A refill rate held exactly: the ratio of integers a rate is, and the integer units a bucket of that rate
// is kept in; and the forms a rate is written in (`refillPerSecond: 1000 / 86400`, `refill: '1000/day'`).
// Pure: no I/O, no clock.
import { ConfigError, show } from '../errors.js';

export const MIN_REFILL_PER_SECOND = 1e-6;
export const MAX_REFILL_PER_SECOND = 1e6;

/** Seconds in each period a `refill` may be written per. */
const SECONDS_PER = { second: 1, minute: 60, hour: 3600, day: 86_400 } as const;

/**
 * A refill written the way people say it: tokens per second, minute, hour or day, e.g. `'1000/day'` or
 * `'10/second'`. The bucket refills continuously at that rate (a daily limit is not reset at midnight):
 * `'1000/day'` is exactly `refillPerSecond: 1000 / 86400`, one token every 86.4 s.
 *
 * The accepted grammar, checked by createLimiter (a ConfigError names the field otherwise):
 * `<digits>[.<digits>][(e|E)[+|-]<digits>]/(second|minute|hour|day)`, e.g. `'1.5/second'`, `'1e3/day'`,
 * with no sign, space, leading or trailing `.`, hex or `Infinity`, and the unit in lower case; the rate
 * it gives must be 1e-6 to 1e6 tokens per second (so `'0/day'` is refused). The type is wider than
 * that: a template type can only say `${number}`, which also admits `'-1/day'`, `'.5/day'` and
 * `'0x10/day'`.
 */
export type Refill = `${number}/${keyof typeof SECONDS_PER}`;

// The exponent in either case, as Number() and `${number}` read it.
const REFILL_PATTERN = /^(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\/(second|minute|hour|day)$/;

/**
 * A limit's tokens per second, from `refillPerSecond` or `refill` (exactly one of them). `refill` gives
 * count / seconds in the period, the very double that writing `refillPerSecond: count / seconds` gives,
 * so exactRate finds the same ratio of integers (`'1000/day'` and `1000 / 86400` are both 5 / 432).
 * Errors name the field written (`at('refill')`); a number is returned unchecked, for the caller's
 * range check.
 */
export function refillOf(at: (field: string) => string, limit: Record<string, unknown>): unknown {
  if (limit.refill === undefined) return limit.refillPerSecond;
  if (limit.refillPerSecond !== undefined) throw new ConfigError(at('refill'), 'replaces refillPerSecond');
  const m = typeof limit.refill === 'string' ? REFILL_PATTERN.exec(limit.refill) : null;
  if (!m) throw new ConfigError(at('refill'), `must be "<count>/<second|minute|hour|day>", got ${show(limit.refill)}`);
  const perSecond = Number(m[1]) / SECONDS_PER[m[2] as keyof typeof SECONDS_PER];
  if (!(perSecond >= MIN_REFILL_PER_SECOND && perSecond <= MAX_REFILL_PER_SECOND)) {
    throw new ConfigError(at('refill'), `must be 1e-6 to 1e6 per second, got ${show(limit.refill)}`);
  }
  return perSecond;
}

/**
 * Buckets are kept in integer units (see ResolvedPolicy.tokenUnits), which every store holds exactly in
 * a double (Lua's numbers, JavaScript's, MongoDB's). A full bucket is at most 2^51 units, and a bucket
 * holding a reservation at most 2^52, so every sum a step forms stays below 2^53 and is exact. For a rate
 * that divides a million tokens per second evenly (1, 10, 1000, 0.001 per second...), one unit is one µs
 * of refill, so the bucket must refill from empty within 2^51 µs: about 71 years.
 */
export const MAX_CAPACITY_UNITS = 2 ** 51;
/** The most debt a step may reach, reservations included (see MAX_CAPACITY_UNITS). */
export const MAX_LIMIT_UNITS = 2 ** 52;
/** A rate that is no ratio of integers small enough is rounded to one that is, within this relative error. */
export const MAX_RATE_ROUNDING = 1e-9;

export interface ExactRate {
  refillPerSecond: number;
  numerator: number;
  denominator: number;
  tokenUnits: number;
  refillUnitsPerUs: number;
}

function gcd(a: bigint, b: bigint): bigint {
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

/**
 * The rate as units: with refillPerSecond = p / q, a token is 1e6 * q / g units and a µs refills p / g of
 * them (g = gcd(1e6 * q, p)), so a take, a refill and a bucket are all whole numbers of units.
 */
function unitsOf(p: number, q: number): { tokenUnits: number; refillUnitsPerUs: number } {
  const g = gcd(1_000_000n * BigInt(q), BigInt(p));
  return { tokenUnits: Number((1_000_000n * BigInt(q)) / g), refillUnitsPerUs: Number(BigInt(p) / g) };
}

/**
 * The ratio of integers p / q that the rate is, found as the first convergent of its continued fraction
 * that rounds to the same double (1000 / 86400 is 5 / 432, 0.1 is 1 / 10, 1 / 3 is 1 / 3). A bucket of
 * `capacity` tokens must fit MAX_CAPACITY_UNITS; a rate whose exact ratio does not fit is rounded to the
 * closest convergent that does, if that is within MAX_RATE_ROUNDING of it, and refused otherwise.
 */
export function exactRate(field: string, rate: number, capacity: number): ExactRate {
  // Convergents h/k of the continued fraction of `rate`.
  let [h0, h1, k0, k1] = [0, 1, 1, 0];
  let x = rate;
  let best: ExactRate | undefined;
  let unitsNeeded = 0;
  for (let i = 0; i < 64; i++) {
    const a = Math.floor(x);
    [h0, h1] = [h1, a * h1 + h0];
    [k0, k1] = [k1, a * k1 + k0];
    if (!Number.isSafeInteger(h1) || !Number.isSafeInteger(k1)) break;
    if (h1 > 0) {
      const units = unitsOf(h1, k1);
      if (capacity * units.tokenUnits > MAX_CAPACITY_UNITS) {
        unitsNeeded = capacity * units.tokenUnits;
        break;
      }
      best = { refillPerSecond: h1 / k1, numerator: h1, denominator: k1, ...units };
      if (h1 / k1 === rate) return best;
    }
    const frac = x - a;
    if (frac === 0) break;
    x = 1 / frac;
  }
  if (best && Math.abs(best.refillPerSecond - rate) <= rate * MAX_RATE_ROUNDING) return best;
  throw new ConfigError(
    field,
    `is too slow for capacity ${capacity}, or too far from any ratio of integers: a bucket is kept exactly as at most 2^51 ` +
      `integer units, and ${capacity} tokens at ${rate}/s would need ${unitsNeeded > 0 ? unitsNeeded.toExponential(3) : 'more'}. ` +
      `For rates that divide 1e6 per second (one unit per µs), capacity / refillPerSecond must be at most ` +
      `${Math.floor(MAX_CAPACITY_UNITS / 1e6)} s (about 71 years); other rates allow less`,
  );
}
