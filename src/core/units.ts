// Exact integer arithmetic on bucket units (integers below 2^53 in doubles): division rounded as asked,
// and the conversion of a debt or a cost between two limits' unit scales. Pure, no imports of the core.
import { MAX_LIMIT_UNITS } from './rate.js';

/**
 * floor(a / b) for integers below 2^53, exactly: the float quotient can round across an integer, so it
 * is corrected by one each way (the products stay below 2^53).
 */
export function floorDiv(a: number, b: number): number {
  let q = Math.floor(a / b);
  if (q * b > a) q--;
  else if ((q + 1) * b <= a) q++;
  return q;
}

/** ceil(a / b) for integers below 2^53, exactly. */
export function ceilDiv(a: number, b: number): number {
  const q = floorDiv(a, b);
  return q * b < a ? q + 1 : q;
}

/**
 * `x` units of a limit whose token is `from` units, in the units of one whose token is `to` units
 * (x a debt or a cost; its sign is kept and its size rounded). Exact when one scale divides the other
 * the right way: to a multiple, x * (to / from); to a divisor, x / (from / to), rounded up for 'up' and
 * down for 'down' (off by less than one unit of `to`). Otherwise whole tokens: ceil or floor of x / from
 * tokens, times `to`. 'up' is for debts and charges, 'down' for refunds: both round against the caller.
 * The size is capped at MAX_LIMIT_UNITS.
 */
export function convertUnits(x: number, from: number, to: number, dir: 'up' | 'down'): number {
  if (x < 0) return -convertUnits(-x, from, to, dir);
  let y: number;
  if (from === to) y = x;
  else if (to % from === 0) y = x * (to / from);
  else if (from % to === 0) y = dir === 'up' ? ceilDiv(x, from / to) : floorDiv(x, from / to);
  else y = (dir === 'up' ? ceilDiv(x, from) : floorDiv(x, from)) * to;
  return y > MAX_LIMIT_UNITS ? MAX_LIMIT_UNITS : y;
}
