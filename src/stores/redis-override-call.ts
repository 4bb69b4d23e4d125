// redisStore's override() and reset(): one call of ./redis-override.ts's script each, on the bucket's
// own key. The client redoes an override with core/override.ts applyOverride from the value the
// script read, and refuses a reply whose written value is not core's: the two cannot drift apart.
import { applyOverride, type OverrideArgs, type OverrideLimit, type OverrideResult } from '../core/override.js';
import { StoreError } from '../errors.js';
import { badReply, message, nowOf, scriptError, storedOf } from './redis-reply.js';
import { limitsArg, policyArg, valueText } from './redis-value.js';
import { OVERRIDE_SCRIPT, OVERRIDE_SCRIPT_SHA } from './redis-override.js';

/** How the store runs a script: EVALSHA, then EVAL on NOSCRIPT. */
export type RunScript = (script: string, sha: string, keys: string[], args: string[]) => Promise<unknown>;

/** Numbers as core compares them: the three fields alone, in their order. */
const plain = (l: OverrideLimit): OverrideLimit => ({ tokenUnits: l.tokenUnits, capacityUnits: l.capacityUnits, refillUnitsPerUs: l.refillUnitsPerUs });

/** A whole number of ms for the script (it reads digits), or a StoreError naming the field. */
function wholeMs(field: string, ms: number): string {
  if (!Number.isSafeInteger(ms) || ms < 0) throw new StoreError('redis', `override ${field} must be a whole number of ms from 0, got ${String(ms)}`);
  return String(ms);
}

/** The script's reply: the clock, and the values before and after (null: no key); undefined when malformed. */
function replyOf(reply: unknown, sentNowUs: number | undefined): { nowUs: number; before: string | null; after: string | null } | undefined {
  if (!Array.isArray(reply) || reply.length !== 3) return undefined;
  const [now, before, after] = reply as [unknown, unknown, unknown];
  const nowUs = nowOf(now, sentNowUs);
  const value = (x: unknown) => (x === 0 ? null : typeof x === 'string' ? x : undefined);
  const b = value(before);
  const a = value(after);
  return Number.isFinite(nowUs) && b !== undefined && a !== undefined ? { nowUs, before: b, after: a } : undefined;
}

/** Store.override on `key`: the change in one atomic script call, checked against core. */
export async function overrideOf(run: RunScript, key: string, args: OverrideArgs, sentNowUs: number | undefined, clientClock: boolean): Promise<OverrideResult> {
  const base = args.base.map(plain);
  const limits = args.limits === null ? null : args.limits?.map(plain);
  const policy = args.policy && { ...args.policy, limits: args.policy.limits.map(plain) };
  // ARGV: see OVERRIDE_SCRIPT.
  const argv = [
    sentNowUs === undefined ? '' : String(sentNowUs),
    'o',
    limitsArg(base),
    limits === null ? '-' : limits === undefined ? '' : limitsArg(limits),
    limits && args.forMs !== undefined ? wholeMs('forMs', args.forMs) : '',
    args.blockForMs === null ? '-' : args.blockForMs === undefined ? '' : wholeMs('blockForMs', args.blockForMs),
    limits !== undefined && args.policyId !== undefined ? args.policyId : '',
    args.policyId === undefined ? policyArg(policy, args.policySeenUs, args.policyHoldMs) : '',
  ];
  let reply: unknown;
  try {
    reply = await run(OVERRIDE_SCRIPT, OVERRIDE_SCRIPT_SHA, [key], argv);
  } catch (err) {
    throw scriptError(err, clientClock);
  }
  try {
    const got = replyOf(reply, sentNowUs);
    if (!got) throw badReply(reply);
    const { state, record } = storedOf(got.before);
    const r = applyOverride(state, record, got.nowUs, { ...args, base, ...(limits === undefined ? {} : { limits }), ...(policy && { policy }) });
    const unchanged = r.write === undefined && r.writeRecord === undefined;
    const want = unchanged ? got.before : valueText(r.write === undefined ? state : (r.write ?? undefined), r.writeRecord === undefined ? record : (r.writeRecord ?? undefined));
    if (want !== got.after) throw badReply(reply);
    const out: OverrideResult = { atUs: got.nowUs };
    if (r.before) out.before = r.before;
    if (r.after) out.after = r.after;
    if (r.stored) out.stored = r.stored;
    return out;
  } catch (err) {
    throw err instanceof StoreError ? err : new StoreError('redis', message(err), { cause: err });
  }
}

/** Store.reset on `key`: the bucket forgotten, its override record kept (a key without one is deleted). */
export async function resetOf(run: RunScript, key: string, sentNowUs: number | undefined, clientClock: boolean): Promise<void> {
  let reply: unknown;
  try {
    reply = await run(OVERRIDE_SCRIPT, OVERRIDE_SCRIPT_SHA, [key], [sentNowUs === undefined ? '' : String(sentNowUs), 'r', '', '', '', '', '', '']);
  } catch (err) {
    throw scriptError(err, clientClock);
  }
  if (!replyOf(reply, sentNowUs)) throw new StoreError('redis', message(badReply(reply)));
}
