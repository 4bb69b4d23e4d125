// A policy-wide change of limits (limiter.setPolicyLimits) as this node sees it. The change is one
// override record under the policy's reserved storage key `{prefix}{policy}*` (no caller's key can name
// it: policy names hold neither ':' nor '*'); this node reads it at most every refreshMs per policy and
// sends what it read with every step (StepArgs.policy), and the store installs it on the key in the same
// atomic step, or clears a key's installed copy once the change is gone. Per-key records win.
//
// The bound: a decision never uses a reading older than refreshMs. A reading starts in the background
// once the one held is half that old (never more than one in flight per policy); a decision that finds
// the one held older than refreshMs waits for the next. So a change made through any node is obeyed by
// every node's decisions within refreshMs plus one store round trip (a reading's age is counted from
// when its call started).
import { stepArgs } from '../core/gcra.js';
import type { OverrideRecord, PolicyOverride } from '../core/override-types.js';
import type { PolicyEntry } from './entry.js';

export interface PolicyWide {
  /**
   * Brings the entry's reading up to date for a decision at monotonic nowMs: nothing to wait for
   * (undefined) when it is younger than refreshMs (past half that, a refresh starts in the background),
   * else a promise of the next reading.
   */
  refresh(entry: PolicyEntry, nowMs: number): Promise<void> | undefined;
  /** This node read or changed the record itself (startedMs: when that call started): used at once. */
  set(entry: PolicyEntry, record: OverrideRecord | undefined, atUs: number, startedMs: number): void;
  /** Half of refreshMs: a reading younger than this needs no refresh. */
  readonly halfMs: number;
}

export interface PolicyWideOptions {
  refreshMs: number;
  monotonicMs: () => number;
  /** Reads the policy's record (Store.override with nothing to change), bounded by the policy's timeoutMs. */
  read(entry: PolicyEntry): Promise<{ record: OverrideRecord | undefined; atUs: number }>;
  /** The change in force has changed (another id, or none now): this node's leases and cached refusals of the policy go. */
  changed(entry: PolicyEntry): void;
}

/** StepArgs.policy for a record read at atUs: its numbers and end while they are live, else none. */
export function changeOf(record: OverrideRecord | undefined, atUs: number): PolicyOverride | undefined {
  if (!record?.limits || record.policyId === undefined) return undefined;
  if (record.untilUs !== undefined && record.untilUs <= atUs) return undefined;
  return record.untilUs === undefined ? { id: record.policyId, limits: record.limits } : { id: record.policyId, limits: record.limits, untilUs: record.untilUs };
}

export function createPolicyWide(options: PolicyWideOptions): PolicyWide {
  const { refreshMs, monotonicMs } = options;

  function set(entry: PolicyEntry, record: OverrideRecord | undefined, atUs: number, startedMs: number): void {
    const s = entry.wide;
    if (startedMs < s.readAtMs) return; // older than the reading held
    const firstRead = s.readAtMs === -Infinity;
    const before = entry.change;
    s.record = record;
    s.atUs = atUs;
    s.readAtMs = startedMs;
    const change = changeOf(record, atUs);
    if ((before?.id ?? '') === (change?.id ?? '')) return;
    // Every step sends the change (StepArgs.policy); the common take's arguments are made once per change.
    entry.change = change;
    entry.takeOne = stepArgs(entry.policy, 1, 0, change);
    if (!firstRead) options.changed(entry);
  }

  function read(entry: PolicyEntry): Promise<void> {
    const s = entry.wide;
    if (s.inFlight) return s.inFlight;
    const started = monotonicMs();
    s.inFlight = options
      .read(entry)
      .then(
        ({ record, atUs }) => set(entry, record, atUs, started),
        () => {
          // The store did not answer: decisions keep the reading held (they follow the policy's fail mode
          // meanwhile anyway), and the next decision starts another reading but does not wait for it.
          s.readAtMs = Math.max(s.readAtMs, started - refreshMs / 2);
        },
      )
      .finally(() => {
        s.inFlight = undefined;
      });
    return s.inFlight;
  }

  return {
    halfMs: refreshMs / 2,
    set,
    refresh(entry, nowMs) {
      const age = nowMs - entry.wide.readAtMs;
      if (age < refreshMs / 2) return undefined;
      const next = read(entry);
      return age < refreshMs ? undefined : next;
    },
  };
}
