// What the MongoDB store reads back from the server: projected documents checked and turned into core's
// types (a bucket, an override record, an operation's record), and the step arguments core needs to
// answer from them. Pure.
import type { BucketState, LimitStep, OpRecord, StepArgs, StepResult } from '../core/gcra.js';
import { numbersLive, type OverrideArgs, type OverrideLimit, type OverrideRecord, type OverrideResult } from '../core/override.js';
import { StoreError } from '../errors.js';

/** One operation id's record as stored (BucketDocument.ops). */
export interface OpRecordDocument {
  id: string;
  fingerprint: string;
  allowed: boolean;
  /** The debts the step reported: after it when allowed, unchanged (at atUs) when denied. */
  debtUnits: number[];
  /** A partial grant's tokens (0 when denied). */
  tokens?: number;
  /** The numbers in force when they were an override record's (StepResult.limits). */
  limits?: OverrideLimit[];
  /** The step was refused by a block until then (StepResult.blockedUntilUs). */
  blockedUntilUs?: number;
  /** A take's: the units it charged each limit (0 each when denied); a settlement's: its charge's. */
  chargedUnits?: number[];
  atUs: number;
  /** atUs + ttlMs * 1000: the record is live while the server clock is before it. */
  expiresAtUs: number;
}

const isNumbers = (v: unknown): v is number[] => Array.isArray(v) && v.every((u) => typeof u === 'number');
const isLimit = (v: unknown): v is OverrideLimit => {
  const l = v as Partial<OverrideLimit> | null;
  return !!l && typeof l.tokenUnits === 'number' && typeof l.capacityUnits === 'number' && typeof l.refillUnitsPerUs === 'number';
};

/** An operation's record as the projection returned it, checked: core's OpRecord, with its expiry and numbers. */
export function readOpRecord(rec: unknown): (OpRecord & { expiresAtUs: number; limits?: OverrideLimit[] }) | undefined {
  const r = rec as Partial<OpRecordDocument> | null | undefined;
  if (!r || typeof r.allowed !== 'boolean' || typeof r.atUs !== 'number' || typeof r.fingerprint !== 'string' || !isNumbers(r.debtUnits)) return undefined;
  const out: OpRecord & { expiresAtUs: number; limits?: OverrideLimit[] } = { allowed: r.allowed, debtUnits: r.debtUnits, atUs: r.atUs, fingerprint: r.fingerprint, expiresAtUs: Number(r.expiresAtUs) };
  if (typeof r.tokens === 'number') out.tokens = r.tokens;
  if (Array.isArray(r.limits) && r.limits.every(isLimit)) out.limits = r.limits;
  if (typeof r.blockedUntilUs === 'number') out.blockedUntilUs = r.blockedUntilUs;
  if (isNumbers(r.chargedUnits)) out.chargedUnits = r.chargedUnits;
  return out;
}

/** Each limit's debt from the d0, d1, ... fields of a projection (a missing one: no document, 0). */
export function readDebts(fields: Record<string, unknown> | undefined, n: number): number[] | undefined {
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) {
    const v = fields?.[`d${i}`] ?? 0;
    if (typeof v !== 'number') return undefined;
    out[i] = v;
  }
  return out;
}

/** A record as stored, checked (a field of the wrong type is a document this store did not write). */
function readRecord(v: unknown): OverrideRecord | undefined {
  if (v === undefined || v === null) return undefined;
  const r = v as Record<string, unknown>;
  const ok =
    typeof r === 'object' &&
    (r.limits === undefined || (Array.isArray(r.limits) && r.limits.every(isLimit))) &&
    (r.untilUs === undefined || typeof r.untilUs === 'number') &&
    (r.blockedUntilUs === undefined || typeof r.blockedUntilUs === 'number') &&
    (r.policyId === undefined || typeof r.policyId === 'string');
  if (!ok) throw new StoreError('mongodb', `unexpected override record ${JSON.stringify(v).slice(0, 120)}`);
  return r as OverrideRecord;
}

/**
 * A document's bucket (debt and atUs, and reservedUntilUs while a reservation is pending; none when
 * full) and record (`ov`), as core reads them.
 */
export function readBucket(doc: Record<string, unknown> | undefined): { state?: BucketState; record?: OverrideRecord } {
  const debt = doc?.debt;
  const atUs = doc?.atUs;
  const reservedUntilUs = doc?.reservedUntilUs;
  const debtUnits = typeof debt === 'number' ? [debt] : isNumbers(debt) ? debt : undefined;
  const out: { state?: BucketState; record?: OverrideRecord } = {};
  if (debtUnits !== undefined && typeof atUs === 'number') out.state = typeof reservedUntilUs === 'number' ? { debtUnits, atUs, reservedUntilUs } : { debtUnits, atUs };
  const record = readRecord(doc?.ov);
  if (record !== undefined) out.record = record;
  return out;
}

/**
 * The step's arguments with StepArgs.base. A step sent without it (a caller other than the limiter) is
 * answered as core/override.ts stepWithRecord answers it: an error where the record has numbers to step
 * under or carry, or a policy-wide change is involved; otherwise its own numbers stand for the base,
 * which nothing then converts. `record` is the key's record as last read.
 */
export function withBase(args: StepArgs, record: OverrideRecord | undefined, nowUs: number, state: BucketState | undefined): StepArgs {
  if (args.base !== undefined) return args;
  if (args.policy !== undefined || record?.policyId !== undefined || numbersLive(record, nowUs) || (state !== undefined && numbersLive(record, state.atUs))) {
    throw new StoreError('mongodb', 'a step on a key with override numbers needs StepArgs.base (the numbers its limits were multiplied out from)');
  }
  return { ...args, base: { tokenUnits: args.limits.map(() => 1), capacityUnits: args.limits.map((l: LimitStep) => l.limitUnits), maxWaitMs: 0 } };
}

/** The longest StepArgs.policyHoldMs a step may ask for (as the Durable Object's): a day. */
const MAX_HOLD_MS = 86_400_000;

/**
 * A step's view of the policy-wide change, checked: StepArgs.policy's id a string, policySeenUs whole
 * µs (the pipeline writes it into a marker's id, "<policySeenUs>."), policyHoldMs whole ms of at most a
 * day (it sets a copy's or marker's expiry).
 */
export function checkPolicyView(args: StepArgs): void {
  const seen = args.policySeenUs;
  const hold = args.policyHoldMs;
  if (
    (args.policy !== undefined && typeof args.policy?.id !== 'string') ||
    (seen !== undefined && !(Number.isSafeInteger(seen) && seen >= 0)) ||
    (hold !== undefined && !(Number.isSafeInteger(hold) && hold >= 0 && hold <= MAX_HOLD_MS))
  ) {
    throw new StoreError('mongodb', 'a step\'s policy needs a string id, its policySeenUs whole µs of 0 or more, and its policyHoldMs whole ms from 0 to 86400000');
  }
}

/** The StepResult fields of core's answer (what to write dropped). */
export function resultOf(r: StepResult & { write?: unknown; writeRecord?: unknown }): StepResult {
  const { write: _w, writeRecord: _r, ...result } = r;
  return result;
}

/** The OverrideResult fields of core's answer. */
export function resultOfOverride(r: OverrideResult & { write?: unknown; writeRecord?: unknown }): OverrideResult {
  const { write: _w, writeRecord: _r, ...result } = r;
  return result;
}

const isLimits = (v: unknown, n: number): boolean => Array.isArray(v) && v.length === n && v.every((l) => isLimit(l) && [l.tokenUnits, l.capacityUnits, l.refillUnitsPerUs].every((x) => Number.isSafeInteger(x) && x > 0));

/** Store.override's arguments, checked: whole positive numbers, one per limit, and non-negative durations. */
export function checkOverrideArgs(args: OverrideArgs): void {
  const n = Array.isArray(args?.base) ? args.base.length : 0;
  const ms = (v: unknown) => v === undefined || (typeof v === 'number' && Number.isFinite(v) && v >= 0);
  const ok =
    n >= 1 &&
    n <= 8 &&
    isLimits(args.base, n) &&
    (args.limits === undefined || args.limits === null || isLimits(args.limits, n)) &&
    ms(args.forMs) &&
    (args.blockForMs === null || ms(args.blockForMs)) &&
    (args.policyId === undefined || typeof args.policyId === 'string') &&
    (args.policy === undefined || (typeof args.policy?.id === 'string' && isLimits(args.policy.limits, n) && ms(args.policy.untilUs))) &&
    ms(args.policySeenUs) &&
    ms(args.policyHoldMs);
  if (!ok) throw new StoreError('mongodb', 'override needs base, limits and a view’s change of 1 to 8 limits of positive whole numbers, and durations and readings of 0 or more');
}
