// A policy-wide change of limits (limiter.setPolicyLimits) as this node sees it. The change is one
// override record under the policy's reserved storage key `{prefix}{policy}*` (no caller's key can name
// it: policy names hold neither ':' nor '*'); this node sends what it read with every step
// (StepArgs.policy), and the store installs it on the key in the same atomic step, or clears a key's
// installed copy once the change is gone. Per-key records win.
//
// A remote store (Redis, MongoDB, a Durable Object): a decision never uses a reading older than
// refreshMs. A reading starts in the background once the one held is half that old (never more than
// one in flight per policy); a decision that finds the one held older than refreshMs waits for the
// next. So a change made through any node is obeyed by every node's decisions within refreshMs plus one
// store round trip (a reading's age is counted from when its call started).
//
// A reading in flight is shared by every decision of the policy, whichever request started it. On a
// Worker, a request's I/O and timers are cancelled when it ends, unless handed to ctx.waitUntil: so a
// background reading goes to the deciding request's waitUntil, and no decision waits for a reading
// longer than the policy's timeoutMs (plus READ_GRACE_MS): past that it is taken for lost (it never
// settles), the next decision starts another, and the waiting ones decide with the reading held.
//
// An in-process store (memory): only this process can change it, so every limiter on the store object
// is told of a change at once (a count of changes per store, compared on each decision), and reads the
// record then (and before its first decision on the policy); no clock is read and no reading ages.
//
// Answers may come in any order (a store's pool or HTTP calls reorder): what a node holds goes by the
// record's version (core/override.ts changeVersion), never back to an older one.
import { stepArgs } from '../core/gcra.js';
import type { OverrideRecord, OverrideResult, PolicyOverride } from '../core/override-types.js';
import { changeVersion } from '../core/override.js';
import { MAX_TIMEOUT_MS } from '../core/policy.js';
import type { Store } from '../store.js';
import type { PolicyEntry } from './entry.js';

/** How much longer than the policy's timeoutMs a reading in flight is waited for before it is taken for lost. */
export const READ_GRACE_MS = 50;

/** The longest policyRefreshMs, in ms. */
export const MAX_POLICY_REFRESH_MS = 60_000;

/**
 * How long a key's copy of a policy-wide change, or a marker, is held past the step that wrote it
 * (StepArgs.policyHoldMs), even with its bucket full: as long as any node may still decide with an older
 * reading, whatever its settings (the longest policyRefreshMs, then a wait for a reading of at most the
 * longest timeoutMs + READ_GRACE_MS). One value on every node: a hold of the writing node's own
 * settings let a node that reads less often move the key back once the hold had passed.
 */
export const POLICY_HOLD_MS = MAX_POLICY_REFRESH_MS + MAX_TIMEOUT_MS + READ_GRACE_MS;

export interface PolicyWide {
  /** Whether the entry's reading may decide now with no look at the store (the hot path asks this). */
  fresh(entry: PolicyEntry): boolean;
  /**
   * Brings the entry's reading up to date for a decision at monotonic nowMs: nothing to wait for
   * (undefined) when it may decide with it (a remote store's past half of refreshMs: a refresh starts in
   * the background, handed to `waitUntil` when given), else a promise of the next reading, which
   * resolves by the policy's timeoutMs + READ_GRACE_MS whatever becomes of the reading.
   */
  refresh(entry: PolicyEntry, nowMs: number, waitUntil?: (promise: Promise<unknown>) => void): Promise<void> | undefined;
  /** This node read the record (startedMs: when that call started): used at once, unless the one held is of a newer version. */
  set(entry: PolicyEntry, record: OverrideRecord | undefined, atUs: number, startedMs: number): void;
  /** This node changed the record: used at once here (as set), and by every limiter on an in-process store. */
  changed(entry: PolicyEntry, record: OverrideRecord | undefined, atUs: number, startedMs: number): void;
}

export interface PolicyWideOptions {
  store: Store;
  refreshMs: number;
  monotonicMs: () => number;
  /** Reads the policy's record (Store.override with nothing to change: the record is `after`), bounded by the policy's timeoutMs. */
  read(entry: PolicyEntry): Promise<Pick<OverrideResult, 'after' | 'atUs' | 'stored'>>;
  /** The change in force has changed (another id, or none now): this node's leases and cached refusals of the policy go. */
  onChange(entry: PolicyEntry): void;
}

/**
 * StepArgs.policySeenUs of this node's steps on the entry's policy: with no change in force, the version
 * of the record last read (a revert's marker, or a change that had ended when first read; 0: none, or
 * decisions went on with no reading answered: the oldest view). Undefined before the first reading: no
 * view. A version, not the reading's time, so that neither a skewed client clock nor a store clock that
 * steps back can outrank a later change. See core/override.ts recordForStep.
 */
export function seenOf(entry: PolicyEntry): number | undefined {
  const s = entry.wide;
  return entry.change === undefined && s.seen >= 0 ? changeVersion(s.record?.policyId) : undefined;
}

/** Policy-wide changes made through any limiter, per in-process store object. */
const changesOf = new WeakMap<Store, { count: number }>();

/** A policy-wide change's id: unique per change, and the names of the limits its numbers are for, in order. */
export const changeId = (names: readonly string[]): string => `${crypto.randomUUID()}#${names.join(',')}`;

/**
 * StepArgs.policy for a record read at atUs: its numbers and end while they are live, else none. The
 * numbers go to the policy's limits by name (the change's id names the limits it was made for, in
 * order; the entry's policy and base are the policy's now): a record written while the policy had
 * other limits (a redeploy added, removed or reordered one) sets those it names, and the others keep
 * the policy's numbers; one that names none of them is not applied.
 */
export function changeOf(record: OverrideRecord | undefined, atUs: number, { policy, base }: Pick<PolicyEntry, 'policy' | 'base'>): PolicyOverride | undefined {
  if (!record?.limits || record.policyId === undefined) return undefined;
  if (record.untilUs !== undefined && record.untilUs <= atUs) return undefined;
  const r = record.limits;
  const hash = record.policyId.indexOf('#');
  const named = hash < 0 ? [] : record.policyId.slice(hash + 1).split(',');
  let any = false;
  const limits = base.map((b, i) => {
    const j = named.indexOf(policy.limits[i]!.name);
    if (j < 0 || r[j] === undefined) return b;
    any = true;
    return r[j]!;
  });
  if (!any) return undefined;
  return record.untilUs === undefined ? { id: record.policyId, limits } : { id: record.policyId, limits, untilUs: record.untilUs };
}

export function createPolicyWide(options: PolicyWideOptions): PolicyWide {
  const { refreshMs, monotonicMs, store } = options;
  const half = refreshMs / 2;
  let changes: { count: number } | undefined;
  if (store.inProcess) {
    changes = changesOf.get(store);
    if (!changes) changesOf.set(store, (changes = { count: 0 }));
  }

  function set(entry: PolicyEntry, record: OverrideRecord | undefined, atUs: number, startedMs: number, seen = changes?.count ?? 0): void {
    const s = entry.wide;
    // Nothing was decided under the view held before its first reading (a decision waits for one).
    const firstRead = s.seen < 0;
    const before = entry.change;
    const seenBefore = seenOf(entry);
    const endedBefore = before?.untilUs !== undefined && before.untilUs <= s.atUs;
    // Any answer saw every change made before its call started: the reading is as fresh as the latest.
    if (startedMs > s.readAtMs) s.readAtMs = startedMs;
    s.seen = seen;
    // What is held goes by the record's version (the store's order of changes), then by the store's
    // clock, never by the order the answers come in: a reading the store made before a change may be
    // answered after it. An older version read later (the record held ended and went) only ages it.
    if ((changeVersion(record?.policyId) - changeVersion(s.record?.policyId) || atUs - s.atUs) < 0) {
      if (atUs <= s.atUs) return;
      record = s.record;
    }
    // A store reads a change that has ended as its marker (its numbers and end dropped): the change this
    // node held keeps them, and steps go on sending it, ended. A key's copy of it is then its marker, and
    // a step reckons the policy's numbers from its end (core/override.ts carried), where the marker's
    // version alone would not say when it ended. (A store that reads it back as stored, OverrideResult.stored,
    // gives its end to a node that first reads it ended too; else that node sends its version.)
    const held = s.record;
    if (record?.limits === undefined && record?.policyId !== undefined && held?.policyId === record.policyId && held.limits !== undefined && held.untilUs !== undefined && held.untilUs <= atUs) record = held;
    s.record = record;
    s.atUs = atUs;
    const ended = record?.untilUs !== undefined && record.limits !== undefined && record.untilUs <= atUs;
    const change = changeOf(record, ended ? record!.untilUs! - 1 : atUs, entry);
    const same = (before?.id ?? '') === (change?.id ?? '') && endedBefore === ended;
    // Every step sends the change (StepArgs.policy), or with none the version of the record read
    // (StepArgs.policySeenUs); the common take's arguments are made again only when either changes.
    if (same && (change !== undefined || seenOf(entry) === seenBefore)) return;
    entry.change = change;
    entry.takeOne = stepArgs(entry.policy, 1, 0, change, seenOf(entry), entry.holdMs);
    // (The change in force changed: another one, none, or the one held has ended.)
    if (!same && !firstRead) options.onChange(entry);
  }

  function read(entry: PolicyEntry, waitUntil?: (promise: Promise<unknown>) => void): Promise<void> {
    const s = entry.wide;
    const started = monotonicMs();
    // A reading in flight longer than the policy's timeout will not settle (its request was cancelled).
    if (s.inFlight && started - s.inFlightAtMs <= entry.policy.timeoutMs + READ_GRACE_MS) return s.inFlight;
    const seen = changes?.count ?? 0;
    const reading: Promise<void> = options
      .read(entry)
      .then(
        // (The record as stored, where the store says it: a change that has ended, with its end.)
        (r) => set(entry, r.stored ?? r.after, r.atUs, started, seen),
        () => {
          // The store did not answer: decisions keep the reading held (they follow the policy's fail mode
          // meanwhile anyway), and the next decision starts another reading but does not wait for it.
          s.readAtMs = Math.max(s.readAtMs, started - half);
        },
      )
      .finally(() => {
        if (s.inFlight === reading) s.inFlight = undefined;
      });
    s.inFlight = reading;
    s.inFlightAtMs = started;
    if (waitUntil) {
      try {
        waitUntil(reading);
      } catch {
        // A runtime that refuses: the reading runs as far as it can, and is replaced if lost.
      }
    }
    return reading;
  }

  /** The reading, or the policy's timeoutMs + READ_GRACE_MS from now, whichever comes first (a timer of the waiting request's own). */
  function bounded(entry: PolicyEntry, reading: Promise<void>): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const lost = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, entry.policy.timeoutMs + READ_GRACE_MS);
      (timer as { unref?: () => void }).unref?.();
    });
    return Promise.race([reading, lost]).finally(() => {
      clearTimeout(timer);
      // Decisions go on now, with or without the reading (lost: a Worker's cancelled request), so the
      // next change read is one for them.
      entry.wide.seen = 0;
    });
  }

  if (changes) {
    const c = changes;
    return {
      fresh: (entry) => entry.wide.seen === c.count,
      refresh: (entry, _nowMs, waitUntil) => (entry.wide.seen === c.count ? undefined : read(entry, waitUntil)),
      set,
      changed: (entry, record, atUs, startedMs) => set(entry, record, atUs, startedMs, ++c.count),
    };
  }
  return {
    fresh: (entry) => monotonicMs() - entry.wide.readAtMs < half,
    refresh(entry, nowMs, waitUntil) {
      const age = nowMs - entry.wide.readAtMs;
      if (age < half) return undefined;
      const next = read(entry, waitUntil);
      return age < refreshMs ? undefined : bounded(entry, next);
    },
    set,
    changed: set,
  };
}
