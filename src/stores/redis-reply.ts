// Reading the scripts' replies: each key's verdict, clock and stored value, checked by redoing the step
// in core/gcra.ts; an operation id's record and its key (in the bucket's hash slot); and the StoreError
// a script failure becomes.
import { repeatOf, settledArgs, type BucketState } from '../core/gcra.js';
import { stepWithRecord, type OverrideRecord } from '../core/override.js';
import { StoreError } from '../errors.js';
import type { StepArgs, StepResult } from '../store.js';
import { recordOf } from './redis-value.js';
import { keySlot } from './redis-slot.js';

export function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

// How servers refuse a command inside a script. The script calls only TIME, GET and SET, and a server
// that has GET and SET but refuses TIME (renamed, disabled, or a proxy that forbids it) says one of these.
const TIME_REFUSED = /(unknown|not allowed|disabled|unsupported|forbidden)[^\n]*(from|in|inside) script|\bTIME\b[^\n]*(not allowed|unknown|unsupported|disabled)/i;

export function badReply(reply: unknown): Error {
  return new Error(`unexpected script reply ${JSON.stringify(reply)?.slice(0, 100)}`);
}

/**
 * The store clock's reading in whole µs as the script replied it (an integer: TIME's seconds × 10^6 plus
 * its microseconds, below 2^53); in client-clock mode, the time sent. NaN for anything else.
 */
export function nowOf(replied: unknown, sentNowUs: number | undefined): number {
  if (sentNowUs !== undefined) return sentNowUs;
  return Number.isSafeInteger(replied) ? (replied as number) : NaN;
}

/**
 * The stored value a reply gives from index i on (the scripts' `read`): a count, then that many integers
 * (the usual value's numbers), 0 for no key, or -1 and the value as stored. Returns it (null: no key;
 * undefined: not a reply the scripts make) and the index after it.
 */
export function storedAt(reply: readonly unknown[], i: number): { stored: number[] | string | null | undefined; next: number } {
  const count = reply[i];
  if (count === 0) return { stored: null, next: i + 1 };
  if (count === -1) return { stored: typeof reply[i + 1] === 'string' ? (reply[i + 1] as string) : undefined, next: i + 2 };
  if (!Number.isSafeInteger(count) || (count as number) < 2 || i + 1 + (count as number) > reply.length) return { stored: undefined, next: reply.length + 1 };
  return { stored: reply.slice(i + 1, i + 1 + (count as number)) as number[], next: i + 1 + (count as number) };
}

/**
 * A stored "<debt1>:...:<debtN>:<atUs>" as the scripts' `fields` reads it: numbers joined by ':', at
 * least two, the last the clock reading (undefined where it reads a full bucket). Lua's tonumber reads
 * no number in an empty or blank field, where JavaScript's Number reads 0, so those are refused here too.
 */
export function stateOf(stored: string | number | readonly unknown[] | null): BucketState | undefined {
  // The usual value, as the scripts' `read` replies it: its numbers as integers (each below 2^53).
  if (Array.isArray(stored)) {
    if (stored.length < 2 || !stored.every((x) => Number.isSafeInteger(x) && (x as number) >= 0)) return undefined;
    return { debtUnits: stored.slice(0, -1) as number[], atUs: stored[stored.length - 1] as number };
  }
  if (typeof stored !== 'string') return undefined;
  // A reservation pending: "~<reservedUntilUs>" after the numbers (digits only, as the scripts read it).
  const tilde = stored.indexOf('~');
  const reserved = tilde < 0 ? undefined : stored.slice(tilde + 1);
  if (reserved !== undefined && !/^\d+$/.test(reserved)) return undefined;
  const parts = (tilde < 0 ? stored : stored.slice(0, tilde)).split(':');
  if (parts.length < 2) return undefined;
  const nums = new Array<number>(parts.length);
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    const x = Number(part);
    if (!Number.isFinite(x) || part.trim() === '') return undefined;
    nums[i] = x;
  }
  const atUs = nums.pop()!;
  return reserved === undefined ? { debtUnits: nums, atUs } : { debtUnits: nums, atUs, reservedUntilUs: Number(reserved) };
}

/**
 * The stored value the scripts read, as the bucket and the override record in it (./redis-value.ts):
 * the usual value's numbers, or the value as stored.
 */
export function storedOf(stored: string | number | readonly unknown[] | null): { state: BucketState | undefined; record: OverrideRecord | undefined } {
  if (typeof stored === 'string' && stored.includes('|')) {
    const r = recordOf(stored);
    if (r) return { state: r.bucket === '' ? undefined : stateOf(r.bucket), record: r.record };
  }
  return { state: stored === null ? undefined : stateOf(stored), record: undefined };
}

/**
 * Reads one key's part of a reply: the verdict (1 or 0), the clock, the stored value the step read (null:
 * no key; its numbers as integers, or the value as stored) and, for a partial grant, the tokens. The script decided and wrote; the client redoes the same
 * step (core/gcra.ts `step`, the script's arithmetic on the same integers) for the debt, so no Redis time
 * goes into formatting it. A step that does not reach the script's verdict means a stored value the two
 * sides read differently (something written by hand): not a bucket this store wrote, so a bad reply.
 */
export function resultOf(args: StepArgs, verdict: unknown, nowUs: number, stored: unknown, tokensReply?: unknown): StepResult {
  const allowed = Number(verdict);
  const tokens = tokensReply === undefined ? undefined : Number(tokensReply);
  const { state, record } = Array.isArray(stored) || typeof stored === 'string' || typeof stored === 'number' ? storedOf(stored) : { state: undefined, record: undefined };
  if (
    (allowed !== 0 && allowed !== 1) ||
    !Number.isFinite(nowUs) ||
    (stored !== null && typeof stored !== 'string' && typeof stored !== 'number' && !(Array.isArray(stored) && state !== undefined)) ||
    (tokens !== undefined && !(Number.isInteger(tokens) && tokens >= 0))
  ) {
    throw badReply([verdict, nowUs, stored, tokensReply]);
  }
  const r = stepWithRecord(state, nowUs, args, record);
  // A blocked grant takes no tokens: the script says 0.
  const taken = r.tokens ?? (r.blockedUntilUs !== undefined && tokens === 0 ? 0 : undefined);
  if (r.allowed !== (allowed === 1) || taken !== tokens || r.debtUnits.length !== args.limits.length || !r.debtUnits.every(Number.isFinite)) {
    throw badReply([verdict, nowUs, stored, tokensReply]);
  }
  const out: StepResult = { allowed: r.allowed, debtUnits: r.debtUnits, atUs: nowUs };
  if (r.blockedUntilUs !== undefined) out.blockedUntilUs = r.blockedUntilUs;
  else if (tokens !== undefined) out.tokens = tokens;
  if (r.limits !== undefined) out.limits = r.limits;
  return out;
}

/**
 * The key of an operation id's record: in the bucket key's Redis Cluster hash slot, so one script can
 * touch both. A bucket key with a hash tag lends it to the record's key; one without any `}` becomes
 * the record key's tag (its slot is its own CRC either way); any other gets a short tag of the same slot.
 * It starts with NUL, which no bucket key does (a bucket key starts with the limiter's prefix, which may
 * hold no NUL, or a policy name), and holds the bucket key's length before it, so no record key is a
 * bucket key and no two (key, id) share one.
 */
export function opKeyOf(key: string, id: string): string {
  const open = key.indexOf('{');
  const close = open >= 0 ? key.indexOf('}', open + 1) : -1;
  const tail = `${key.length}:${key}\u0000${id}`;
  if (close > open + 1) return `\u0000op\u0000${tail}`;
  if (!key.includes('}')) return `\u0000op\u0000{${key}}${tail}`;
  return `\u0000op\u0000{${tagOfSlot(keySlot(key))}}${tail}`;
}

const slotTags = new Map<number, string>();
/** The first of "0", "1", "2", ... whose slot is `slot` (about 16,384 tries at most; cached). */
function tagOfSlot(slot: number): string {
  let tag = slotTags.get(slot);
  for (let i = 0; tag === undefined; i++) if (keySlot(String(i)) === slot) tag = String(i);
  slotTags.set(slot, tag);
  return tag;
}

/**
 * A recorded operation's answer: the record is the step's reply material ("<fingerprint>\n<verdict>\n
 * <now>\n<tokens>\n<value read>"), from which the same step is redone to the same result, then given as
 * core's repeatOf does (repeated, or a conflict when the fingerprint differs).
 */
export function repeated(args: StepArgs, record: unknown, withTokens: boolean): StepResult {
  if (typeof record !== 'string') throw badReply(['op', record]);
  const parts = record.split('\n');
  // Five fields, or six with what a take charged ("c...") or a settlement's charge took ("s...").
  if (parts.length !== 5 && parts.length !== 6) throw badReply(['op', record]);
  const [fingerprint, verdict, now, tokens, value, charged] = parts as [string, string, string, string, string, string | undefined];
  // Another request's record: its step cannot be redone with these arguments, and nothing is applied.
  if (fingerprint !== args.op!.fingerprint) return { allowed: false, debtUnits: [], atUs: Number(now), conflict: true };
  let redo: StepArgs = { ...args, op: undefined };
  if (args.settle !== undefined) {
    if (charged?.[0] !== 's') throw badReply(['op', record]);
    redo = settledArgs(redo, unitsOf(charged.slice(1)));
  }
  const again = (a: StepArgs) => resultOf(a, verdict, Number(now), value === '' ? null : value, withTokens ? tokens : undefined);
  let first: StepResult;
  try {
    first = again(redo);
  } catch {
    // The step ran under its node's view of the policy-wide change then; this retry may carry a newer
    // one (a change made since), under which the step reaches another verdict. The record does not say
    // which view it had: redone with none (review 7: a bad reply, which the circuit breaker counted).
    const { policy: _view, policySeenUs: _seen, ...before } = redo;
    first = again(before);
  }
  return repeatOf({ ...first, atUs: Number(now), fingerprint }, args);
}

/**
 * A charge's units as a script gives them, "<units1>:<units2>:...", each an integer below 2^53 (one
 * limit's may arrive as a number: @upstash/redis parses a reply string that is a number).
 */
export function unitsOf(charged: unknown): number[] {
  if (typeof charged === 'number') charged = String(charged);
  if (typeof charged !== 'string' || !/^\d+(?::\d+)*$/.test(charged)) throw badReply([charged]);
  const units = charged.split(':').map(Number);
  if (!units.every(Number.isSafeInteger)) throw badReply([charged]);
  return units;
}

/** Turns a script failure into the StoreError the limiter reports (naming the TIME opt-in where it applies). */
export function scriptError(err: unknown, clientClock: boolean): StoreError {
  const m = message(err);
  if (!clientClock && TIME_REFUSED.test(m)) {
    return new StoreError(
      'redis',
      `the server refused TIME inside a script (${m}). edge-limiter reads time from the store so that ` +
        'clients with skewed clocks agree; if this server cannot, opt in to redisStore({ clientClock: true }).',
      { cause: err },
    );
  }
  return new StoreError('redis', `script failed: ${m}`, { cause: err });
}