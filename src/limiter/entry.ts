// What a decision needs of its policy, built once per policy by ./options.ts: the policy, its storage
// key prefix, the common take's arguments, its numbers for runtime changes, and this node's reading of
// its policy-wide change (kept up to date by ./policy-wide.ts).
import { stepArgs } from '../core/gcra.js';
import { baseNumbers, type OverrideLimit, type OverrideRecord, type PolicyOverride } from '../core/override.js';
import type { ResolvedPolicy } from '../core/policy.js';
import type { StepArgs } from '../store.js';

/** One policy's reading of its policy-wide record on this node. */
export interface PolicyWideState {
  /** Monotonic ms when the latest call answered (a reading, or this node's change) started: the reading's age counts from it (-Infinity: none yet). */
  readAtMs: number;
  /** The read in flight, if any, and the monotonic ms when it started. */
  inFlight: Promise<void> | undefined;
  inFlightAtMs: number;
  /** The record as read (undefined: none), and the store clock's reading then. */
  record: OverrideRecord | undefined;
  atUs: number;
  /**
   * -1 until a decision may have been made under the view held: no reading answered, nor waited for as
   * long as a decision waits (so a first decision reads, on an in-process store too). Then, on an
   * in-process store, the count of policy-wide changes on it when the record held was read.
   */
  seen: number;
}

export interface PolicyEntry {
  policy: ResolvedPolicy;
  /** `{prefix}{policy}:` */
  keyPrefix: string;
  /**
   * stepArgs(policy, 1, 0, change): the arguments of a take of one token (on every limit) with no wait,
   * made again when the policy-wide change this node sees changes.
   */
  takeOne: StepArgs;
  /** The policy's own numbers, one per limit (Store.override's base). */
  base: readonly OverrideLimit[];
  /** `{prefix}{policy}*`: the storage key of the policy-wide change (no caller's key can be it). */
  policyKey: string;
  /** The policy-wide change this node sees now (StepArgs.policy of every step), if any. */
  change: PolicyOverride | undefined;
  /** This node's reading of the policy-wide record. */
  wide: PolicyWideState;
  /** StepArgs.policyHoldMs of this node's steps on the policy. */
  holdMs: number;
}

export function newEntry(policy: ResolvedPolicy, prefix: string, holdMs = 0): PolicyEntry {
  return {
    policy,
    keyPrefix: `${prefix}${policy.name}:`,
    takeOne: stepArgs(policy, 1, 0),
    base: baseNumbers(policy),
    policyKey: `${prefix}${policy.name}*`,
    change: undefined,
    wide: { readAtMs: -Infinity, inFlight: undefined, inFlightAtMs: 0, record: undefined, atUs: 0, seen: -1 },
    holdMs,
  };
}
