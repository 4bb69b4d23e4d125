// Request-argument checks shared by the library and the HTTP layers. Pure.
import { InvalidInputError } from '../errors.js';

export const MAX_KEY_BYTES = 512;
const MAX_KEY_BYTES_FAST = Math.floor(MAX_KEY_BYTES / 3);
/** The longest wait `take` may reserve for, in ms (one hour). The permit endpoint allows less. */
export const MAX_WAIT_MS = 3_600_000;

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

export function assertCost(cost: unknown, capacity: number): asserts cost is number {
  if (typeof cost !== 'number' || !Number.isInteger(cost) || cost < 1 || cost > capacity) {
    throw new InvalidInputError('cost', `must be an integer from 1 to the policy capacity ${capacity}, got ${String(cost)}`);
  }
}

export function assertWaitMs(field: string, value: unknown, max: number = MAX_WAIT_MS): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > max) {
    throw new InvalidInputError(field, `must be an integer from 0 to ${max} (ms), got ${String(value)}`);
  }
}
