// Runtime limits: a key's own numbers (setLimits), a block (block/unblock) and a policy-wide change
// (setPolicyLimits), each one Store.override call on the store's clock, stored beside the bucket and
// read by every store step in the same atomic step. A change through this limiter drops the key's
// lease (its tokens go back) and cached refusal here at once; other nodes' end within their bounds
// (a lease's usable age, a cached refusal's retryAfterMs). Every change is one onAudit event.
import type { LimitNumbers } from '../core/decision.js';
import type { OverrideArgs, OverrideRecord, OverrideResult } from '../core/override.js';
import { policyView } from '../core/gcra.js';
import { assertKey } from '../core/key.js';
import type { ResolvedPolicy } from '../core/policy.js';
import { InvalidInputError, StoreError, show } from '../errors.js';
import { newerThanView, numbersOf } from '../core/override.js';
import { resolveLimitsInput, toNumbers } from './limits-input.js';
import type { PolicyEntry } from './entry.js';
import type { AdminOptions, AuditEvent, KeyLimits, Limiter, LimitsState, SetLimitsOptions } from './types.js';
import { withTimeout, type Wiring } from './wiring.js';
import { changeId, changeOf, seenOf } from './policy-wide.js';

/** The longest a runtime change or a block may be set for: 400 days, in ms. */
export const MAX_CHANGE_MS = 400 * 86_400_000;

/** The Limiter's runtime-limits methods (documented there). */
export type RuntimeLimits = Pick<Limiter, 'setLimits' | 'getLimits' | 'clearLimits' | 'block' | 'unblock' | 'setPolicyLimits' | 'getPolicyLimits' | 'clearPolicyLimits'>;

function msField(field: string, value: unknown): number {
  // Number.isInteger is false for anything but a number.
  if (!Number.isInteger(value) || (value as number) < 1 || (value as number) > MAX_CHANGE_MS) {
    throw new InvalidInputError(field, `must be an integer from 1 to ${MAX_CHANGE_MS} (ms, 400 days), got ${show(value)}`);
  }
  return value as number;
}

const leftMs = (untilUs: number, atUs: number) => Math.max(0, Math.ceil((untilUs - atUs) / 1000));

export function createRuntimeLimits(w: Wiring): RuntimeLimits {
  const { store, getEntry, monotonicMs } = w;

  /** One Store.override call on `storageKey`, bounded by the policy's timeoutMs. */
  function override(entry: PolicyEntry, storageKey: string, args: Omit<OverrideArgs, 'base'>): Promise<OverrideResult> {
    if (typeof store.override !== 'function') return Promise.reject(new StoreError(store.name, 'this store keeps no runtime limits (it has no Store.override)', { permanent: 'unsupported' }));
    const override = store.override.bind(store);
    return withTimeout((o) => override(storageKey, { base: entry.base, ...args }, o), entry.policy.timeoutMs, store.name).catch((error: unknown) => {
      throw error instanceof StoreError ? error : new StoreError(store.name, 'the store did not answer: the change may not have been applied', { cause: error });
    });
  }

  /**
   * A key's limits from its record as read at atUs. No numbers of its own: the policy-wide change this
   * node sees (its next step installs it), else the policy's.
   */
  function stateOf(entry: PolicyEntry, record: OverrideRecord | undefined, atUs: number): LimitsState {
    const { policy } = entry;
    const out: LimitsState = { limits: toNumbers(policy), source: 'policy' };
    // A key's copy of a policy-wide change, or a marker, newer than this node's view decides the key's
    // steps (core/override.ts recordForStep), so it is what the key's limits are.
    const copy = record?.policyId;
    const newer = copy !== undefined && newerThanView(copy, entry.change, seenOf(entry) ?? 0);
    if (record?.limits && (record.untilUs === undefined || record.untilUs > atUs) && (copy === undefined || newer)) {
      out.limits = toNumbers(policy, record.limits);
      out.source = copy === undefined ? 'key' : 'policy-wide';
      if (record.untilUs !== undefined) out.expiresInMs = leftMs(record.untilUs, atUs);
    } else if (entry.change && !newer && (entry.change.untilUs === undefined || entry.change.untilUs > atUs)) {
      // The change this node sees, while in force (a newer marker, or a copy that has ended, leaves the policy's numbers).
      const wide = entry.change;
      out.limits = toNumbers(policy, wide.limits);
      out.source = 'policy-wide';
      // Left at the store's clock now, as this node reckons it: the reading's, plus the time since its call started.
      if (wide.untilUs !== undefined) out.expiresInMs = leftMs(wide.untilUs, entry.wide.atUs + 1000 * (monotonicMs() - entry.wide.readAtMs));
    }
    if (record?.blockedUntilUs !== undefined && record.blockedUntilUs > atUs) out.blockedForMs = leftMs(record.blockedUntilUs, atUs);
    return out;
  }

  /** A policy-wide record's state as read at atUs: the numbers it gives this policy's limits (policy-wide.ts changeOf). */
  function policyStateOf(entry: PolicyEntry, record: OverrideRecord | undefined, atUs: number): LimitsState {
    const { policy } = entry;
    const change = changeOf(record, atUs, entry);
    if (!change) return { limits: toNumbers(policy), source: 'policy' };
    const out: LimitsState = { limits: toNumbers(policy, change.limits), source: 'policy-wide' };
    if (change.untilUs !== undefined) out.expiresInMs = leftMs(change.untilUs, atUs);
    return out;
  }

  /**
   * One change: the store call, then this node's lease and cached refusal of the key (or, `wide`, of the
   * policy's keys) and its known block, and the audit event with the state before and after. `wide` is
   * the policy-wide record's change (key '*' in the audit event); a caller's key, '*' too, is a key.
   */
  async function change(action: AuditEvent['action'], entry: PolicyEntry, key: string, args: Omit<OverrideArgs, 'base'>, opts: AdminOptions, wide = false): Promise<KeyLimits> {
    const { policy } = entry;
    const storageKey = wide ? entry.policyKey : entry.keyPrefix + key;
    const who = typeof opts.actor === 'string' ? { actor: opts.actor } : {};
    const started = monotonicMs();
    let result: OverrideResult;
    try {
      // A key's change carries its bucket under this node's view of the policy-wide change, as its steps
      // do, and that view is no older than a decision's may be (a limiter that has not decided on the
      // policy yet, or not lately, reads the change first).
      if (!wide) await reading(entry);
      result = await override(entry, storageKey, wide ? args : { ...args, ...policyView(entry.change, seenOf(entry), entry.holdMs) });
    } catch (error) {
      w.audit({ action, policy: policy.name, key, ...who, atMs: Date.now(), error });
      throw error;
    }
    let before: LimitsState;
    let after: LimitsState;
    if (wide) {
      before = policyStateOf(entry, result.before, result.atUs);
      after = policyStateOf(entry, result.after, result.atUs);
      // This node obeys it at once (and drops its leases and cached refusals of the policy's keys).
      w.policyWide?.changed(entry, result.after, result.atUs, started);
    } else {
      before = stateOf(entry, result.before, result.atUs);
      after = stateOf(entry, result.after, result.atUs);
      // Tokens leased and refusals cached under the old numbers go now; a block is known here at once.
      w.leases?.release(storageKey);
      w.denied?.forget(storageKey, started);
      if (after.blockedForMs !== undefined) w.blocks.note(storageKey, started + after.blockedForMs);
      else w.blocks.clear(storageKey);
    }
    w.audit({ action, policy: policy.name, key, ...who, before, after, atMs: Date.now() });
    return { policy: policy.name, key, ...after, previous: before };
  }

  /** The entry's reading of the policy-wide change brought up to date, as a decision brings it (policy-wide.ts refresh). */
  async function reading(entry: PolicyEntry): Promise<void> {
    if (w.policyWide !== undefined && !w.policyWide.fresh(entry)) await w.policyWide.refresh(entry, monotonicMs());
  }

  const forMsOf = (opts: SetLimitsOptions) => (opts.expiresInMs === undefined ? {} : { forMs: msField('expiresInMs', opts.expiresInMs) });

  return {
    async setLimits(name, key, limits, opts = {}) {
      const entry = getEntry(name);
      assertKey(key);
      const resolved = resolveLimitsInput(entry.policy, limits);
      return change('limits', entry, key, { limits: resolved.map(numbersOf), ...forMsOf(opts) }, opts);
    },
    async getLimits(name, key) {
      const entry = getEntry(name);
      assertKey(key);
      await reading(entry);
      const result = await override(entry, entry.keyPrefix + key, {});
      return { policy: name, key, ...stateOf(entry, result.after, result.atUs) };
    },
    async clearLimits(name, key, opts = {}) {
      const entry = getEntry(name);
      assertKey(key);
      return change('limits', entry, key, { limits: null }, opts);
    },
    async block(name, key, opts) {
      const entry = getEntry(name);
      assertKey(key);
      return change('block', entry, key, { blockForMs: msField('forMs', opts?.forMs) }, opts);
    },
    async unblock(name, key, opts = {}) {
      const entry = getEntry(name);
      assertKey(key);
      return change('unblock', entry, key, { blockForMs: null }, opts);
    },
    async setPolicyLimits(name, limits, opts = {}) {
      const entry = getEntry(name);
      const resolved = resolveLimitsInput(entry.policy, limits);
      // Each change has its own id, so that keys holding an earlier change's numbers take the new ones.
      const { key: _, ...out } = await change('policy-limits', entry, '*', { limits: resolved.map(numbersOf), policyId: changeId(entry.policy.limits.map((l) => l.name)), ...forMsOf(opts) }, opts, true);
      return out;
    },
    async getPolicyLimits(name) {
      const entry = getEntry(name);
      const started = monotonicMs();
      const result = await override(entry, entry.policyKey, {});
      w.policyWide?.set(entry, result.after, result.atUs, started);
      return { policy: name, ...policyStateOf(entry, result.after, result.atUs) };
    },
    async clearPolicyLimits(name, opts = {}) {
      // The record becomes the marker of this revert (a version above the change's), so that every
      // node's next reading orders it after the change (policy-wide.ts seenOf).
      const entry = getEntry(name);
      const { key: _, ...out } = await change('policy-limits', entry, '*', { limits: null, policyId: changeId([]) }, opts, true);
      return out;
    },
  };
}
