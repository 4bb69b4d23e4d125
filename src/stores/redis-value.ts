// The stored value of a key with an override record (issue 31), and the ARGV the scripts take for a
// step's base and its view of the policy-wide change, in TypeScript: written and read alike by the
// scripts (./redis-record.ts, the Lua) and the client (./redis-reply.ts, ./redis-store.ts).
//
// A key with no record holds today's value, "<debt1>:...:<debtN>:<atUs>", and its hot path is
// unchanged. While a reservation is pending (a take that waits, BucketState.reservedUntilUs), the bucket
// is "<debt1>:...:<debtN>:<atUs>~<reservedUntilUs>" (whole µs of the server clock): unusual, so the
// straight-line takes never match it, and every write keeps it until it passes. A record lives in the
// same key, after the bucket:
//   "<bucket>|<t1>,<c1>,<r1>,...|<untilUs>|<blockedUntilUs>|<policyId>"
// <bucket> is the usual value, or nothing for a full bucket; then each limit's numbers (tokenUnits,
// capacityUnits, refillUnitsPerUs; nothing: no numbers), untilUs and blockedUntilUs in whole µs of the
// server clock (nothing: absent) and the policy-wide change's id (nothing: a key's own record). Any
// record makes the value unusual, so the straight-line takes never match it, and the step under a
// record (core/override.ts stepWithRecord, mirrored line by line in `rstep`) runs on it instead. One
// key, so the record is in the bucket's hash slot by construction, and one GET reads both.
import type { OverrideLimit, OverrideRecord } from '../core/override.js';
import type { BucketState } from '../core/gcra.js';

/** The record's part of a stored value, as the scripts write it (see above). */
export function recordText(r: OverrideRecord): string {
  const limits = r.limits ? r.limits.map((l) => `${l.tokenUnits},${l.capacityUnits},${l.refillUnitsPerUs}`).join(',') : '';
  return `${limits}|${r.untilUs ?? ''}|${r.blockedUntilUs ?? ''}|${r.policyId ?? ''}`;
}

/** A stored value as the scripts write it: the bucket (absent: full) and the record (absent: the usual value; no key when both are). */
export function valueText(state: BucketState | undefined, record: OverrideRecord | undefined): string | null {
  const bucket = state ? `${state.debtUnits.join(':')}:${state.atUs}${state.reservedUntilUs === undefined ? '' : `~${state.reservedUntilUs}`}` : '';
  if (record) return `${bucket}|${recordText(record)}`;
  return state ? bucket : null;
}

const RECORD_VALUE = /^([\d:~]*)\|([\d,]*)\|(\d*)\|(\d*)\|(.*)$/s;

/**
 * A stored value with a record, read as the scripts' `rparse` reads it: the bucket part ('' for a full
 * bucket) and the record; undefined when the value holds no record the scripts would read (then it is
 * read as a bucket alone: a value with a '|' that is no record is no bucket either, a full one).
 */
export function recordOf(value: string): { bucket: string; record: OverrideRecord } | undefined {
  const m = RECORD_VALUE.exec(value);
  if (!m) return undefined;
  const [, bucket, l, u, bl, id] = m as unknown as [string, string, string, string, string, string];
  const record: { -readonly [K in keyof OverrideRecord]: OverrideRecord[K] } = {};
  if (l !== '') {
    const parts = l.split(',');
    if (parts.length % 3 !== 0 || !parts.every((p) => /^\d+$/.test(p))) return undefined;
    const nums = parts.map(Number);
    const limits: OverrideLimit[] = [];
    for (let i = 0; i < nums.length; i += 3) {
      if (![nums[i]!, nums[i + 1]!, nums[i + 2]!].every((x) => x > 0 && x < 2 ** 53)) return undefined;
      limits.push({ tokenUnits: nums[i]!, capacityUnits: nums[i + 1]!, refillUnitsPerUs: nums[i + 2]! });
    }
    record.limits = limits;
  }
  if (u !== '') record.untilUs = Number(u);
  if (bl !== '') record.blockedUntilUs = Number(bl);
  if (id !== '') record.policyId = id;
  return { bucket, record };
}

/** StepArgs.base as the scripts take it: "<maxWaitMs>,<tokenUnits1>,<capacityUnits1>,...". */
export function baseArg(base: { tokenUnits: readonly number[]; capacityUnits: readonly number[]; maxWaitMs: number } | undefined): string {
  if (base === undefined) return '';
  let s = String(base.maxWaitMs);
  for (let i = 0; i < base.tokenUnits.length; i++) s += `,${base.tokenUnits[i]},${base.capacityUnits[i]}`;
  return s;
}

/** Numbers per limit as the scripts take and store them: "<t1>,<c1>,<r1>,...". */
export const limitsArg = (limits: readonly OverrideLimit[]) => limits.map((l) => `${l.tokenUnits},${l.capacityUnits},${l.refillUnitsPerUs}`).join(',');

/**
 * A step's view of the policy-wide change and its hold as the scripts take them: StepArgs.policy as
 * "<t1>,<c1>,<r1>,...|<untilUs>|<holdMs>|<id>"; with none, StepArgs.policySeenUs and policyHoldMs as
 * "!<seenUs>|<holdMs>" (each "" when absent); "" for none of the three. The hold goes before the id,
 * which may hold any character but a control one.
 */
export function policyArg(policy: { id: string; limits: readonly OverrideLimit[]; untilUs?: number } | undefined, seenUs?: number, holdMs?: number): string {
  if (policy === undefined) return seenUs === undefined && holdMs === undefined ? '' : `!${seenUs ?? ''}|${holdMs ?? ''}`;
  return `${limitsArg(policy.limits)}|${policy.untilUs ?? ''}|${holdMs ?? ''}|${policy.id}`;
}
