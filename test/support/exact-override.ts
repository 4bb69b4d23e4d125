import fc from 'fast-check';
import { expect } from 'vitest';
import { adjustArgs, grantArgs, policyView, refundArgs, stepArgs, type StepArgs, type StepResult } from '../../src/core/gcra.js';
import { resolvePolicy, type ResolvedPolicy } from '../../src/core/policy.js';
import type { OverrideLimit, OverrideResult, PolicyOverride, Store } from '../../src/store.js';
import { gapUsArb, rateArb } from './exact-bucket.js';
// The exact reference model of limits changed at runtime (issue 31), in BigInt, on a clock of whole µs:
// several limits decided together, numbers set and cleared mid-debt (with an end), blocks, a policy-wide
// change seen by the caller, lease grants and late refunds. It shares no code with src/: it keeps its own
// debts in its own reckoning of the units (one token = 1e6 q / gcd(1e6 q, p) units, p / gcd refilled per µs
// for a rate of p / q per second, as the README's Exactness section states), tracks which numbers the
// bucket is in with a flag rather than src's invariant, and decays step by step rather than from a
// stored reading. The rules it states are docs/exactness.md's:
// - a change of numbers carries each debt whole: converted (exact when one scale divides the other, else
//   whole tokens; rounded up; at most MAX_LIMIT_UNITS), never cut to the new capacity, so that no change,
//   nor a change and its revert, gives back what was spent;
// - numbers that end at untilUs: the debt decays under them to untilUs, is carried there to what the
//   key is in after them (the policy-wide change the step sees, if it was made by then, else the base),
//   and decays under those after;
// - a live block refuses every take (a peek, a reservation, a lease grant), which takes nothing but
//   writes a changed record as any step does (a policy-wide change installed, an end passed); an
//   adjustment (a charge, a refund, a settlement) is applied as without it, and says the key is blocked;
// - under other numbers a cost of n tokens is n of their tokens, a wait's cap their capacity plus the
//   wait at their rate, and a late refund gives back the lesser of what is left of it at either rate.

const MAX = 2n ** 52n;
/** A record's fields as text (bigints as digits), to tell whether a step changed it. */
const recordText = (r: object) => JSON.stringify(r, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
const gcd = (a: bigint, b: bigint): bigint => (b === 0n ? a : gcd(b, a % b));
const ceilDiv = (a: bigint, b: bigint) => (a <= 0n ? 0n : (a + b - 1n) / b);
const pos = (a: bigint) => (a > 0n ? a : 0n);
const min = (a: bigint, b: bigint) => (a < b ? a : b);

/** A limit as the model's tests write it: capacity and a rate of p / q tokens per second. */
export interface Spec {
  capacity: number;
  p: number;
  q: number;
}

/** A limit's numbers in the model's own reckoning. */
interface Numbers {
  token: bigint;
  cap: bigint;
  rate: bigint;
}

function numbers(s: Spec): Numbers {
  const g0 = gcd(BigInt(s.p), BigInt(s.q));
  const [p, q] = [BigInt(s.p) / g0, BigInt(s.q) / g0];
  const g = gcd(1_000_000n * q, p);
  const token = (1_000_000n * q) / g;
  return { token, cap: BigInt(s.capacity) * token, rate: p / g };
}

const same = (a: Numbers, b: Numbers) => a.token === b.token && a.cap === b.cap && a.rate === b.rate;

/** x units of tokens of `from` units in tokens of `to` units, per the stated rule (size rounded, sign kept, capped). */
function convert(x: bigint, from: bigint, to: bigint, up: boolean): bigint {
  if (x < 0n) return -convert(-x, from, to, up);
  let y: bigint;
  if (from === to) y = x;
  else if (to % from === 0n) y = x * (to / from);
  else if (from % to === 0n) y = up ? ceilDiv(x, from / to) : x / (from / to);
  else y = (up ? ceilDiv(x, from) : x / from) * to;
  return y > MAX ? MAX : y;
}

/**
 * One debt carried from numbers f to t at `at`: whole, in t's units (rounded up); with a reservation
 * due at r after `at`, at least as the bucket will stand then (decayed under f to r, carried, plus t's
 * refill until r); with one due less than 1 ms before `at` or after it, from d plus the refill counted
 * since the slots of that ms (at most 1 ms of f's, and at most what they took).
 */
function carry(d: bigint, f: Numbers, t: Numbers, at = 0n, r = 0n): bigint {
  // A reservation due less than 1 ms before the change, or after it: its caller (told whole ms) may
  // still come, under t, so f's last ms of refill is not counted.
  if (r > 0n && r > at - 1000n) {
    // The refill counted since the slots of the ms before: at most 1 ms of f's, and at most what those
    // reservations took (the capacity plus f's refill from the ms's start to the latest slot, or to `at`).
    const span = (r < at ? r : at) - (at - 1000n);
    const lag = 1000n * f.rate;
    const took = f.cap + span * f.rate;
    const more = lag < took ? lag : took;
    d = d + more > MAX ? (d > MAX ? d : MAX) : d + more;
  }
  const whole = convert(d, f.token, t.token, true);
  if (r <= at) return whole;
  let held = (r - at) * t.rate + convert(pos(d - (r - at) * f.rate), f.token, t.token, true);
  if (held > MAX) held = MAX;
  return held > whole ? held : whole;
}

interface ModelRecord {
  limits?: Numbers[];
  untilUs?: bigint;
  blockedUntilUs?: bigint;
  policyId?: string;
}

/** What a step answers, in the model: the verdict, each debt in the numbers in force, and those numbers when a record's. */
export interface ModelStep {
  allowed: boolean;
  debtUnits: number[];
  limits?: OverrideLimit[];
  blockedUntilUs?: number;
  tokens?: number;
}

const view = (n: Numbers): OverrideLimit => ({ tokenUnits: Number(n.token), capacityUnits: Number(n.cap), refillUnitsPerUs: Number(n.rate) });

/** A bucket of several limits with an override record beside it. */
export class OverrideModel {
  readonly base: Numbers[];
  debts: bigint[];
  /** Whether the debts are in the record's numbers (else the base's). */
  inRecord = false;
  record: ModelRecord = {};
  at = 0n;
  /** When the last reservation granted is due (0n: none). */
  reservedUntil = 0n;
  /** The store clock's reading at the model's 0 (versions of changes are store-clock readings). */
  epochUs = 0n;
  /**
   * The debts as a store last wrote them, and when (a store writes a step that takes, gives back or
   * grants something, or that changes the record; a peek, a refusal and a read write nothing): a move
   * to other numbers counts them from the later of that and when those came in force.
   */
  written: { at: bigint; debts: bigint[] };
  constructor(base: Spec[]) {
    this.base = base.map(numbers);
    this.debts = base.map(() => 0n);
    this.written = { at: 0n, debts: this.debts };
  }
  /** A store writes the bucket now (see written), when `wrote` (a step that took or gave back something) or the record changed from `before`. */
  private writes(wrote: boolean, before: string): boolean {
    if (!wrote && recordText(this.record) === before) return false;
    this.written = { at: this.at, debts: this.debts.slice() };
    return true;
  }
  /**
   * The answer of a step that wrote nothing (see writes) leaves the model as the store is: as before it
   * (a step that counts nothing refilled where numbers in force were unknown holds only for itself).
   */
  private kept<T>(wrote: boolean, answer: T, s0: Saved): T {
    if (!wrote) Object.assign(this, s0);
    return answer;
  }
  private live(t: bigint): boolean {
    return this.record.limits !== undefined && (this.record.untilUs === undefined || t < this.record.untilUs);
  }
  /** The numbers the debts are in now. */
  private current(): Numbers[] {
    return this.inRecord ? this.record.limits! : this.base;
  }
  private decay(to: bigint) {
    const n = this.current();
    this.debts = this.debts.map((d, i) => pos(d - (to - this.at) * n[i]!.rate));
    this.at = to;
  }
  /**
   * Moves to t: the numbers' end on the way (if any) carries the debts there to what the key is in
   * after it: the policy-wide change the caller sees (`change`), where the step installs it (the key's
   * record says nothing newer), it was made by then (its version at most the end) and is in force at t;
   * else the base.
   */
  advance(t: number, change?: PolicyChange) {
    const tt = BigInt(t);
    const u = this.record.untilUs;
    if (this.inRecord && u !== undefined && tt >= u) {
      this.decay(u);
      const r = this.record;
      const installs =
        change !== undefined &&
        BigInt(change.versionUs) <= u &&
        (change.untilUs === undefined || BigInt(change.untilUs) > tt) &&
        (r.policyId === undefined || (r.policyId !== change.id && versionOf(r.policyId) <= versionOf(change.id)));
      const next: ModelRecord = installs ? { limits: change.limits.map(numbers), policyId: change.id } : {};
      if (installs && change.untilUs !== undefined) next.untilUs = BigInt(change.untilUs);
      const to = next.limits ?? this.base;
      this.debts = this.debts.map((d, i) => (same(r.limits![i]!, to[i]!) ? d : carry(d, r.limits![i]!, to[i]!, u, this.reservedUntil)));
      if (installs) {
        if (r.blockedUntilUs !== undefined) next.blockedUntilUs = r.blockedUntilUs;
        this.record = next;
      } else this.inRecord = false;
    }
    this.decay(tt);
    // What has ended is forgotten (it no longer says anything), but a copy of a policy-wide change
    // becomes the marker of that change (its id stays).
    if (this.record.limits !== undefined && !this.live(tt)) {
      delete this.record.limits;
      delete this.record.untilUs;
    }
    if (this.record.blockedUntilUs !== undefined && this.record.blockedUntilUs <= tt) delete this.record.blockedUntilUs;
  }
  /** Puts the numbers of `next` in force at t (after advance): the debts carried from the numbers before. */
  private become(next: ModelRecord, t: bigint) {
    if (next.limits !== undefined && next.untilUs !== undefined && next.untilUs <= t) {
      delete next.limits;
      delete next.untilUs;
    }
    const from = this.current();
    const to = next.limits ?? this.base;
    this.debts = this.debts.map((d, i) => (same(from[i]!, to[i]!) ? d : carry(d, from[i]!, to[i]!, t, this.reservedUntil)));
    this.record = next;
    this.inRecord = next.limits !== undefined;
  }
  private blocked(t: bigint): boolean {
    return this.record.blockedUntilUs !== undefined && this.record.blockedUntilUs > t;
  }
  /** The answer with the state as it is now. */
  private answer(allowed: boolean, extra: { tokens?: number } = {}): ModelStep {
    // A full bucket is no bucket: its reservation horizon goes with it, once its caller may have come (1 ms after it).
    if (this.debts.every((d) => d === 0n) && this.reservedUntil <= this.at - 1000n) this.reservedUntil = 0n;
    const out: ModelStep = { allowed, debtUnits: this.debts.map(Number), ...extra };
    if (this.inRecord) out.limits = this.record.limits!.map(view);
    if (this.blocked(this.at)) out.blockedUntilUs = Number(this.record.blockedUntilUs);
    return out;
  }
  /**
   * Before a step: the policy-wide change the caller sees (or none, read at seenUs) installed, replaced
   * or cleared on a key without numbers of its own, unless the key holds a newer one (a version above
   * the change's, or at or above seenUs), which decides. A copy cleared with seenUs leaves the marker
   * "<seenUs>.".
   */
  private seePolicy(s0: Saved, change: PolicyChange | undefined, seenUs?: number): void {
    const next = this.viewed(this.record, change, seenUs);
    if (next !== this.record) this.become(next, this.at);
    this.atLeastFromView(s0, this.at, this.record, seenUs, change);
  }
  /**
   * After a step's or an override's carry from the state `s0` (saved before it) at t: a move to the
   * numbers of `viewed` (the record a step under the caller's view leaves: another copy, a marker, or
   * numbers that ended) counted from when they came in force too (a change's version, a marker's, else
   * seenUs), nothing refilled between the bucket's numbers (or their end) and then; each limit keeps the
   * greater debt of the two reckonings.
   */
  private atLeastFromView(s0: Saved, t: bigint, viewed: ModelRecord, seenUs?: number, change?: PolicyChange) {
    const r0 = s0.record;
    const ended = s0.inRecord && r0.untilUs !== undefined && t >= r0.untilUs;
    const moved = ended || viewed.policyId !== r0.policyId;
    const { at, debts } = this.written;
    // A change the caller sees that has ended, and whose copy `viewed` is: in force from its end.
    const endUs = change?.untilUs !== undefined && BigInt(change.untilUs) <= t && viewed.policyId === change.id ? BigInt(change.untilUs) : undefined;
    // What was in force between the bucket's reading and the view's record is unknown (a key in the
    // policy's numbers read before they were last in force up to that record, a copy moved off that is
    // not of the change the record replaced, a change seen that has ended since the reading): nothing
    // refilled there.
    // (A view with no change does not say which change the revert replaced: a move off any copy older than it.)
    const prior = change !== undefined ? priorOfId(change.id) : seenUs === undefined ? undefined : ([seenUs, seenUs] as const);
    const liveAt = r0.limits !== undefined && (r0.untilUs === undefined || at < r0.untilUs);
    const copyMissed = prior !== undefined && (liveAt ? moved && r0.policyId !== undefined && versionOf(r0.policyId) < prior[0] : at + this.epochUs < BigInt(prior[1]));
    const missed = (endUs !== undefined && endUs > at) || copyMissed;
    if (!moved && !missed) return;
    // Numbers that ended run to their end; a copy of a change that the record seen replaced before its
    // end, only to that record's version; one replaced by what the step does not know, to the write.
    const seenVersion = BigInt(viewed.policyId !== undefined ? versionOf(viewed.policyId) : 0) - this.epochUs;
    const replacedAt = seenVersion < at ? at : seenVersion;
    const t0 = !ended ? at : r0.policyId === undefined ? r0.untilUs! : copyMissed ? at : r0.policyId === viewed.policyId ? r0.untilUs! : replacedAt < r0.untilUs! ? replacedAt : r0.untilUs!;
    let version = BigInt(Math.max(viewed.policyId !== undefined ? versionOf(viewed.policyId) : 0, seenUs ?? 0)) - this.epochUs;
    if (endUs !== undefined && endUs > version) version = endUs;
    const w = version < t0 ? t0 : version > t ? t : version;
    const f = s0.inRecord ? r0.limits! : this.base;
    const x = viewed.limits !== undefined && (viewed.untilUs === undefined || t < viewed.untilUs) ? viewed.limits : this.base;
    const to = this.current();
    this.debts = this.debts.map((d, i) => {
      const a = pos(debts[i]! - ((ended || missed ? t0 : w) - at) * f[i]!.rate);
      let k = pos((same(f[i]!, x[i]!) ? a : carry(a, f[i]!, x[i]!, w, s0.reservedUntil)) - (t - w) * x[i]!.rate);
      if (!same(x[i]!, to[i]!)) k = carry(k, x[i]!, to[i]!, t, s0.reservedUntil);
      return k > d ? k : d;
    });
  }
  /** The record `r` (nothing ended in it) under the caller's view, as seePolicy leaves it: `r` itself when the view changes nothing. */
  private viewed(r: ModelRecord, change: PolicyChange | undefined, seenUs?: number): ModelRecord {
    // No view at all is the oldest: the key keeps what it holds.
    const seen = seenUs ?? 0;
    if (r.policyId !== undefined) {
      const v = versionOf(r.policyId);
      if (change !== undefined ? v > versionOf(change.id) : v >= seen) return r;
    }
    if (change === undefined) {
      if (r.policyId === undefined || r.limits === undefined) return r;
      const block = r.blockedUntilUs === undefined ? {} : { blockedUntilUs: r.blockedUntilUs };
      return { policyId: `${seen}.`, ...block };
    }
    const own = r.policyId === undefined && r.limits !== undefined;
    if (own || r.policyId === change.id) return r;
    const next: ModelRecord = { limits: change.limits.map(numbers), policyId: change.id };
    if (change.untilUs !== undefined) next.untilUs = BigInt(change.untilUs);
    if (r.blockedUntilUs !== undefined) next.blockedUntilUs = r.blockedUntilUs;
    return next;
  }
  /** The cap of a debt under the numbers in force for a wait of waitMs. */
  private cap(n: Numbers, waitMs: number) {
    const c = n.cap + BigInt(waitMs) * n.rate * 1000n;
    return c > MAX ? MAX : c;
  }

  take(t: number, costs: number[], maxWaitMs: number, change?: PolicyChange, seenUs?: number): ModelStep {
    // A refusal by a block writes nothing but a changed record (a view installed, an end passed):
    // with the record as it was, the model goes back to before this step.
    const [s0, before] = [this.state(), recordText(this.record)];
    const undo = () => Object.assign(this, s0);
    this.advance(t, change);
    this.seePolicy(s0, change, seenUs);
    if (this.blocked(this.at)) return this.refuse(undo, before);
    const n = this.current();
    const after = this.debts.map((d, i) => d + BigInt(costs[i]!) * n[i]!.token);
    const peek = costs.every((c) => c === 0);
    // Under a record's numbers a cost above their capacity is refused (a wait would admit it as one burst).
    const limit = (i: number) => (this.inRecord && BigInt(costs[i]!) * n[i]!.token > n[i]!.cap ? n[i]!.cap : this.cap(n[i]!, maxWaitMs));
    const allowed = peek || after.every((d, i) => costs[i] === 0 || d <= limit(i));
    if (allowed && !peek) {
      this.debts = after;
      // A reservation: due when every limit it charged has refilled to its capacity (µs, rounded up).
      let wait = 0n;
      after.forEach((d, i) => {
        if (costs[i]! > 0 && d > n[i]!.cap) {
          const w = (d - n[i]!.cap + n[i]!.rate - 1n) / n[i]!.rate;
          if (w > wait) wait = w;
        }
      });
      if (wait > 0n && this.at + wait > this.reservedUntil) this.reservedUntil = this.at + wait;
      // Every limit the reservation charges counts it when it comes: its debt at least the refill until
      // then, plus the cost (several limits; one limit is already there).
      if (wait > 0n && this.debts.length > 1) {
        this.debts = this.debts.map((d, i) => {
          if (costs[i]! <= 0) return d;
          let atDue = wait * n[i]!.rate + BigInt(costs[i]!) * n[i]!.token;
          if (atDue > MAX) atDue = MAX;
          return atDue > d ? atDue : d;
        });
      }
    }
    return this.kept(this.writes(allowed && !peek, before), this.answer(allowed), s0);
  }
  /** The model's state now. */
  private state(): Saved {
    return { debts: this.debts, inRecord: this.inRecord, record: { ...this.record }, at: this.at, reservedUntil: this.reservedUntil };
  }
  /** A function that puts the model back as it is now. */
  private saved(): () => void {
    const s = this.state();
    return () => Object.assign(this, s);
  }
  /** A refusal by a block: reported in the numbers the step would have run under; kept only when the record changed from `before` (its recordText). */
  private refuse(undo: () => void, before: string): ModelStep {
    const a = this.answer(false);
    if (recordText(this.record) === before) undo();
    else this.writes(true, before);
    return a;
  }
  adjust(t: number, costs: number[], change?: PolicyChange, seenUs?: number): ModelStep {
    const [s0, before] = [this.state(), recordText(this.record)];
    this.advance(t, change);
    // Applied during a block too: work done is paid for, and what a lease did not use goes back.
    this.seePolicy(s0, change, seenUs);
    const n = this.current();
    this.debts = this.debts.map((d, i) => {
      const c = BigInt(costs[i]!) * n[i]!.token;
      if (c < 0n) return this.keep(i, d, pos(d + c));
      const cap = this.cap(n[i]!, 3_600_000);
      return d + c > cap ? (d > cap ? d : cap) : d + c;
    });
    return this.kept(this.writes(costs.some((c) => c !== 0), before), this.answer(true), s0);
  }
  /** A lease grant on a policy of one limit: the whole tokens that fit, at most `tokens`. */
  grant(t: number, tokens: number, change?: PolicyChange, seenUs?: number): ModelStep {
    // A refusal by a block writes nothing but a changed record (a view installed, an end passed):
    // with the record as it was, the model goes back to before this step.
    const [s0, before] = [this.state(), recordText(this.record)];
    const undo = () => Object.assign(this, s0);
    this.advance(t, change);
    this.seePolicy(s0, change, seenUs);
    if (this.blocked(this.at)) return this.refuse(undo, before);
    const n = this.current()[0]!;
    const fit = (n.cap - this.debts[0]!) / n.token;
    const k = fit < 0n ? 0n : fit < BigInt(tokens) ? fit : BigInt(tokens);
    if (k === 0n) return this.kept(this.writes(false, before), this.answer(false, { tokens: 0 }), s0);
    this.debts[0] = this.debts[0]! + k * n.token;
    this.writes(true, before);
    return this.answer(true, { tokens: Number(k) });
  }
  /**
   * A refund of `tokens` of a policy of one limit, granted at sinceUs (or already decayed): under other
   * numbers, the lesser of what is left of it at the base's rate and at theirs.
   */
  refund(t: number, tokens: number, sinceUs: number | undefined, change?: PolicyChange, seenUs?: number): ModelStep {
    const [s0, before] = [this.state(), recordText(this.record)];
    this.advance(t, change);
    // Applied during a block too: work done is paid for, and what a lease did not use goes back.
    this.seePolicy(s0, change, seenUs);
    const b = this.base[0]!;
    const n = this.current()[0]!;
    const left = (x: Numbers) => pos(BigInt(tokens) * x.token - (sinceUs === undefined ? 0n : pos(BigInt(t - sinceUs)) * x.rate));
    let back = left(n);
    if (this.inRecord && sinceUs !== undefined) back = min(back, convert(left(b), b.token, n.token, false));
    this.debts[0] = this.keep(0, this.debts[0]!, pos(this.debts[0]! - back));
    // A late refund with nothing left of it is a peek to a step under a record or a view of a change
    // (core argsUnder: a cost of 0), which writes nothing; a plain key's step applies it all the same.
    const plain = Object.keys(s0.record).length === 0 && change === undefined;
    return this.kept(this.writes(plain || sinceUs === undefined || back > 0n, before), this.answer(true), s0);
  }
  /**
   * Limit i's debt after a refund that left `after` of `d`: while a reservation is pending, no lower
   * than the refill until it is due plus the capacity (at most d), what the reservations hold.
   */
  private keep(i: number, d: bigint, after: bigint): bigint {
    if (!(this.reservedUntil > 0n && this.reservedUntil > this.at - 1000n)) return after;
    const n = this.current()[i]!;
    const held = min(d, (this.reservedUntil - this.at) * n.rate + n.cap);
    return after > held ? after : held;
  }
  /** The record as live at t (OverrideResult.before), the model left as it is. */
  recordAt(t: number) {
    const undo = this.saved();
    this.advance(t);
    const r = this.recordView();
    undo();
    return r;
  }
  /**
   * Store.override: numbers set (for forMs) or cleared, a block set or lifted; with the caller's view of
   * the policy-wide change (a change, or none read at seenUs), the record then left as a step under that
   * view leaves it, and numbers that ended carried at their end as such a step carries them. The debts
   * carried once, from the numbers before to those after. A read (nothing set) changes nothing.
   */
  override(t: number, o: { limits?: Spec[] | null; forMs?: number; blockForMs?: number | null }, change?: PolicyChange, seenUs?: number) {
    const write = o.limits !== undefined || o.blockForMs !== undefined;
    // A read writes nothing: what has ended waits for the key's next step, under its view.
    if (!write) return this.recordAt(t);
    const s0 = this.state();
    this.advance(t, change);
    const tt = BigInt(t);
    const viewed = this.viewed(this.record, change, seenUs);
    const next: ModelRecord = { ...this.record };
    if (o.limits === null) {
      // A key's clear takes its own numbers away; a copy of a policy-wide change or a marker stays.
      if (next.policyId === undefined) {
        delete next.limits;
        delete next.untilUs;
      }
    } else if (o.limits !== undefined) {
      next.limits = o.limits.map(numbers);
      delete next.policyId;
      if (o.forMs === undefined) delete next.untilUs;
      else next.untilUs = tt + BigInt(o.forMs) * 1000n;
    }
    if (o.blockForMs === null) delete next.blockedUntilUs;
    else if (o.blockForMs !== undefined) next.blockedUntilUs = tt + BigInt(o.blockForMs) * 1000n;
    if (next.blockedUntilUs !== undefined && next.blockedUntilUs <= tt) delete next.blockedUntilUs;
    if (next.limits !== undefined && next.untilUs !== undefined && next.untilUs <= tt) {
      delete next.limits;
      delete next.untilUs;
    }
    this.become(this.viewed(next, change, seenUs), tt);
    this.atLeastFromView(s0, tt, viewed, seenUs, change);
    return this.kept(this.writes(false, recordText(s0.record)), this.recordView(), s0);
  }
  /** Whether every debt is 0 at t (the model itself unmoved). */
  fullAt(t: number): boolean {
    const undo = this.saved();
    this.advance(t);
    const full = this.debts.every((d) => d === 0n);
    undo();
    return full;
  }
  /**
   * A store may let a key's copy of a policy-wide change, or a marker, go with its full bucket (the next
   * step installs what its node sees again): when the store's record `got` shows none, the model's goes too.
   */
  dropInstalledWhenFull(got: { policyId?: string } | undefined, t: number) {
    if (this.record.policyId === undefined || got?.policyId !== undefined || !this.fullAt(t)) return;
    this.advance(t);
    const { blockedUntilUs } = this.record;
    this.record = blockedUntilUs === undefined ? {} : { blockedUntilUs };
    this.inRecord = false;
  }
  /** Store.reset: the bucket full, the record kept. */
  reset(t: number) {
    this.advance(t);
    this.debts = this.debts.map(() => 0n);
    this.reservedUntil = 0n;
    this.written = { at: this.at, debts: this.debts };
  }
  /** The record as OverrideResult.after shows it (store-clock readings relative to the model's 0). */
  recordView() {
    const r = this.record;
    const out: { limits?: OverrideLimit[]; untilUs?: number; blockedUntilUs?: number; policyId?: string } = {};
    if (r.limits !== undefined) out.limits = r.limits.map(view);
    if (r.untilUs !== undefined) out.untilUs = Number(r.untilUs);
    if (r.blockedUntilUs !== undefined) out.blockedUntilUs = Number(r.blockedUntilUs);
    if (r.policyId !== undefined) out.policyId = r.policyId;
    return Object.keys(out).length === 0 ? undefined : out;
  }
}

/** The model's state, as saved before a step. */
interface Saved {
  debts: bigint[];
  inRecord: boolean;
  record: ModelRecord;
  at: bigint;
  reservedUntil: bigint;
}

/** What a policy-wide id says of the record it replaced (core/override.ts priorOf, restated): "<version>.<prevUs>.<baseUs>.". */
function priorOfId(id: string): readonly [number, number] | undefined {
  const m = /^\d+\.(\d+)\.(\d+)\./.exec(id);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

/** A policy-wide id's version (core/override.ts changeVersion, restated): its digits before the first '.'. */
function versionOf(id: string): number {
  const m = /^(\d{1,16})\./.exec(id);
  return m ? Number(m[1]) : 0;
}

/** A policy-wide change as the caller sees it, with its end relative to the model's clock. */
export interface PolicyChange {
  id: string;
  limits: Spec[];
  untilUs?: number;
  /** Its version (the id's) on the model's clock. */
  versionUs: number;
}

// ---------------------------------------------------------------------------------------------------
// Operations, and the run of a store against the model.

/** Other numbers for a limit: capacities from 1 to 120 and rates across the allowed range. */
const specArb = fc.record({ capacity: fc.integer({ min: 1, max: 120 }), rate: rateArb }).map((s) => ({ capacity: s.capacity, p: s.rate.p, q: s.rate.q }));
/** Durations in ms (an override's forMs, a block's): often short enough to end within a run. */
const msArb = fc.oneof(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 1, max: 3000 }), fc.integer({ min: 1, max: 60_000 }));

export type OverrideOp =
  | { kind: 'take'; dtUs: number; costs: number[]; maxWaitMs: number }
  | { kind: 'adjust'; dtUs: number; costs: number[] }
  | { kind: 'peek'; dtUs: number }
  | { kind: 'grant'; dtUs: number; tokens: number }
  | { kind: 'refund'; dtUs: number; tokens: number; backUs?: number }
  | { kind: 'set'; dtUs: number; limits: Spec[]; forMs?: number }
  | { kind: 'set-one'; dtUs: number; index: number; limit: Spec; forMs?: number }
  | { kind: 'clear'; dtUs: number }
  | { kind: 'block'; dtUs: number; forMs: number }
  | { kind: 'unblock'; dtUs: number }
  | { kind: 'reset'; dtUs: number }
  | { kind: 'policy-set'; dtUs: number; limits: Spec[]; forMs?: number }
  | { kind: 'policy-clear'; dtUs: number }
  | { kind: 'stale-take'; dtUs: number; costs: number[]; maxWaitMs: number; back: number };

/** Base limits (1 to 3) and operations at fake-clock gaps (multiples of resolutionUs). */
export function overrideCaseArb(resolutionUs = 1, maxLength = 40) {
  return fc.array(fc.record({ capacity: fc.integer({ min: 1, max: 60 }), rate: rateArb }), { minLength: 1, maxLength: 3 }).chain((ls) => {
    const base = ls.map((l) => ({ capacity: l.capacity, p: l.rate.p, q: l.rate.q }));
    const n = base.length;
    const dt = gapUsArb(resolutionUs);
    const costs = (lo: number) => fc.array(fc.integer({ min: lo, max: 60 }), { minLength: n, maxLength: n });
    const limits = fc.array(specArb, { minLength: n, maxLength: n });
    const forMs = fc.option(msArb, { nil: undefined, freq: 2 });
    const kinds: fc.Arbitrary<OverrideOp>[] = [
      fc.record({ kind: fc.constant('take' as const), dtUs: dt, costs: costs(0), maxWaitMs: fc.constantFrom(0, 0, 0, 10, 250, 5000) }),
      fc.record({ kind: fc.constant('take' as const), dtUs: dt, costs: costs(0), maxWaitMs: fc.constant(0) }),
      fc.record({ kind: fc.constant('adjust' as const), dtUs: dt, costs: fc.array(fc.integer({ min: -80, max: 80 }), { minLength: n, maxLength: n }) }),
      fc.record({ kind: fc.constant('peek' as const), dtUs: dt }),
      fc.record({ kind: fc.constant('set' as const), dtUs: dt, limits, forMs }),
      fc.record({ kind: fc.constant('set-one' as const), dtUs: dt, index: fc.integer({ min: 0, max: n - 1 }), limit: specArb, forMs }),
      fc.record({ kind: fc.constant('clear' as const), dtUs: dt }),
      fc.record({ kind: fc.constant('block' as const), dtUs: dt, forMs: msArb }),
      fc.record({ kind: fc.constant('unblock' as const), dtUs: dt }),
      fc.record({ kind: fc.constant('reset' as const), dtUs: dt }),
      fc.record({ kind: fc.constant('policy-set' as const), dtUs: dt, limits, forMs }),
      fc.record({ kind: fc.constant('policy-clear' as const), dtUs: dt }),
      // A node that has not read the last changes yet (1 to 3 views back): two nodes disagreeing.
      fc.record({ kind: fc.constant('stale-take' as const), dtUs: dt, costs: costs(0), maxWaitMs: fc.constantFrom(0, 0, 250), back: fc.integer({ min: 1, max: 3 }) }),
      fc.record({ kind: fc.constant('stale-take' as const), dtUs: dt, costs: costs(0), maxWaitMs: fc.constant(0), back: fc.integer({ min: 1, max: 2 }) }),
    ];
    if (n === 1) {
      kinds.push(
        fc.record({ kind: fc.constant('grant' as const), dtUs: dt, tokens: fc.integer({ min: 1, max: 60 }) }),
        fc.record({ kind: fc.constant('refund' as const), dtUs: dt, tokens: fc.integer({ min: 1, max: 60 }), backUs: fc.option(fc.integer({ min: 0, max: 5_000_000 }).map((us) => Math.ceil(us / resolutionUs) * resolutionUs), { nil: undefined }) }),
      );
    }
    return fc.record({ base: fc.constant(base), ops: fc.array(fc.oneof(...kinds), { minLength: 1, maxLength }) });
  });
}

const resolved = (specs: Spec[]): ResolvedPolicy =>
  resolvePolicy('x', specs.length === 1 ? { capacity: specs[0]!.capacity, refillPerSecond: specs[0]!.p / specs[0]!.q } : { limits: Object.fromEntries(specs.map((s, i) => [`l${i}`, { capacity: s.capacity, refillPerSecond: s.p / s.q }])) }, { onStoreError: 'deny', timeoutMs: 1000 });
const implNumbers = (specs: Spec[]): OverrideLimit[] => resolved(specs).limits.map((l) => ({ tokenUnits: l.tokenUnits, capacityUnits: l.capacityUnits, refillUnitsPerUs: l.refillUnitsPerUs }));

/**
 * The record the store may show for the model's `want`: a record a step installed for a policy-wide
 * change may be gone (a block beside it kept) while the bucket is full, since the next step installs it again
 * with nothing to carry (the memory store drops it with its bucket).
 */
function installedOrNone(want: ReturnType<OverrideModel['recordView']>, got: { policyId?: string } | undefined, full: boolean) {
  if (!full || want?.policyId === undefined || got?.policyId !== undefined) return want;
  const { limits: _l, untilUs: _u, policyId: _p, ...rest } = want;
  return Object.keys(rest).length === 0 ? undefined : rest;
}

/** A store's step result, as the model states it (relative store-clock readings). */
function seen(r: StepResult, t0: number): ModelStep {
  const out: ModelStep = { allowed: r.allowed, debtUnits: r.debtUnits };
  if (r.limits !== undefined) out.limits = r.limits;
  if (r.blockedUntilUs !== undefined) out.blockedUntilUs = r.blockedUntilUs - t0;
  if (r.tokens !== undefined) out.tokens = r.tokens;
  return out;
}

/**
 * Runs the operations straight against `store` on `key` (Store.step with the limiter's step arguments,
 * Store.override, Store.reset) and the model side by side: after each, the same verdict, debts in the
 * same units, the same numbers in force, block and tokens; after each change, the same record. The
 * first call is a peek that reads the store's clock (every later reading is relative to it); `advance`
 * moves that clock by dtUs.
 */
export async function checkOverridesAgainstModel(store: Store, key: string, advance: (dtUs: number) => void, base: Spec[], ops: OverrideOp[]): Promise<void> {
  const policy = resolved(base);
  const baseNumbers = implNumbers(base);
  const model = new OverrideModel(base);
  const first = await store.step(key, stepArgs(policy, 0, 0));
  const t0 = first.atUs!;
  model.epochUs = BigInt(t0);
  let t = 0;
  // The views of the policy-wide record a node may hold, oldest first: a change (its id versioned as
  // Store.override versions it: max(store time, last version + 1)), or none read at seenUs (a revert's
  // marker version). The current one is the last; a stale node holds an earlier one.
  const views: { change?: PolicyChange; seenUs: number }[] = [{ seenUs: 0 }];
  let lastVersion = 0;
  let change: PolicyChange | undefined;
  let seenUs: number | undefined = 0;
  // Each record's id says the version it replaced and since when the policy's numbers were in force up
  // to it (core/override.ts priorOf): none, a change (live then, or ended), or a revert (since its own).
  let revertBaseUs = 0;
  const priorNow = () => {
    if (lastVersion === 0) return [0, 0] as const;
    if (change === undefined) return [lastVersion, revertBaseUs] as const;
    return [lastVersion, change.untilUs === undefined || t < change.untilUs ? Math.max(t0 + t, lastVersion + 1) : t0 + change.untilUs] as const;
  };
  const implOf = (c: PolicyChange | undefined): PolicyOverride | undefined =>
    c === undefined ? undefined : { id: c.id, limits: implNumbers(c.limits), ...(c.untilUs === undefined ? {} : { untilUs: t0 + c.untilUs }) };
  const implChange = () => implOf(change);
  const seenOf = () => (change === undefined ? seenUs : undefined);
  let lastRecord: OverrideResult['after'];
  const relative = (r: OverrideResult['after']) => r && { ...r, ...(r.untilUs === undefined ? {} : { untilUs: r.untilUs - t0 }), ...(r.blockedUntilUs === undefined ? {} : { blockedUntilUs: r.blockedUntilUs - t0 }) };
  for (const [i, op] of ops.entries()) {
    t += op.dtUs;
    advance(op.dtUs);
    const where = { i, t, op };
    const step = async (args: StepArgs, want: ModelStep) => {
      const r = await store.step(key, args);
      expect(r.atUs, 'the store clock moved as the model').toBe(t0 + t);
      expect({ ...where, got: seen(r, t0) }).toEqual({ ...where, got: want });
    };
    /** Store.override against the model's: the record before (what is live of it at t) and after. */
    const override = async (args: Parameters<NonNullable<Store['override']>>[1], o: Parameters<OverrideModel['override']>[1]) => {
      const before = model.recordAt(t);
      // A change to the key carries the node's view of the policy-wide change, as the limiter sends it.
      const write = o.limits !== undefined || o.blockForMs !== undefined;
      const after = model.override(t, o, change, seenOf());
      const full = model.fullAt(t);
      const r = await store.override!(key, write ? { ...args, ...policyView(implChange(), seenOf(), undefined) } : args);
      lastRecord = r.after;
      expect(r.atUs).toBe(t0 + t);
      expect({ ...where, before: relative(r.before), after: relative(r.after) }).toEqual({ ...where, before: installedOrNone(before, r.before, full), after: installedOrNone(after, r.after, full) });
    };
    switch (op.kind) {
      case 'take':
      case 'peek': {
        const costs = op.kind === 'peek' ? base.map(() => 0) : op.costs.map((c, j) => Math.min(c, base[j]!.capacity));
        const wait = op.kind === 'peek' ? 0 : op.maxWaitMs;
        const want = model.take(t, costs, wait, change, seenOf());
        await step(stepArgs(policy, costs, wait, implChange(), seenOf()), want);
        break;
      }
      case 'adjust': {
        const want = model.adjust(t, op.costs, change, seenOf());
        await step(adjustArgs(policy, op.costs, implChange(), seenOf()), want);
        break;
      }
      case 'grant': {
        const tokens = Math.min(op.tokens, base[0]!.capacity);
        await step(grantArgs(policy, tokens, implChange(), seenOf()), model.grant(t, tokens, change, seenOf()));
        break;
      }
      case 'refund': {
        const since = op.backUs === undefined ? undefined : Math.max(0, t - op.backUs);
        const want = model.refund(t, op.tokens, since, change, seenOf());
        await step(refundArgs(policy, op.tokens * policy.tokenUnits, since === undefined ? undefined : t0 + since, implChange(), seenOf()), want);
        break;
      }
      case 'set':
      case 'set-one': {
        // One limit of several: every limit's numbers, the unnamed ones the base's.
        const specs = op.kind === 'set' ? op.limits : base.map((b, j) => (j === op.index ? op.limit : b));
        const forMs = op.forMs === undefined ? {} : { forMs: op.forMs };
        await override({ base: baseNumbers, limits: implNumbers(specs), ...forMs }, { limits: specs, ...forMs });
        break;
      }
      case 'clear':
        await override({ base: baseNumbers, limits: null }, { limits: null });
        break;
      case 'block':
        await override({ base: baseNumbers, blockForMs: op.forMs }, { blockForMs: op.forMs });
        break;
      case 'unblock':
        await override({ base: baseNumbers, blockForMs: null }, { blockForMs: null });
        break;
      case 'reset':
        model.reset(t);
        await store.reset(key);
        break;
      case 'policy-set':
        // A new change has a new id (an id names one change: the same id with other numbers is never sent).
      {
        const [p, b] = priorNow();
        lastVersion = Math.max(t0 + t, lastVersion + 1);
        change = { id: `${lastVersion}.${p}.${b}.c${i}`, versionUs: lastVersion - t0, limits: op.limits, ...(op.forMs === undefined ? {} : { untilUs: t + op.forMs * 1000 }) };
        seenUs = undefined;
        views.push({ change, seenUs: lastVersion });
      }
        break;
      case 'policy-clear':
      {
        revertBaseUs = priorNow()[1];
        lastVersion = Math.max(t0 + t, lastVersion + 1);
        change = undefined;
        seenUs = lastVersion;
        views.push({ seenUs });
      }
        break;
      case 'stale-take': {
        const v = views[Math.max(0, views.length - 1 - op.back)]!;
        const costs = op.costs.map((c, j) => Math.min(c, base[j]!.capacity));
        const staleSeen = v.change === undefined ? v.seenUs : undefined;
        const want = model.take(t, costs, op.maxWaitMs, v.change, staleSeen);
        await step(stepArgs(policy, costs, op.maxWaitMs, implOf(v.change), staleSeen), want);
        break;
      }
    }
    // Whatever a step installed or dropped, the record the store holds is the model's: read it. A copy
    // or marker the store let go with its full bucket is gone from the model too.
    await override({ base: baseNumbers }, {});
    // A store may let it go in that very read (the memory store drops a copy with no bucket once the
    // block beside it has ended): what it holds now is what a second read shows.
    model.dropInstalledWhenFull(model.record.policyId === undefined ? lastRecord : (await store.override!(key, { base: baseNumbers })).after, t);
  }
}
