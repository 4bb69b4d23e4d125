// One key's token lease on this node, and the arithmetic that keeps leases within the stated bounds.
// Pure: time is a parameter (this node's monotonic ms). The store calls, timers and the map of leases
// are in lease.ts.
//
// The bound. Every leased token is taken from the store by an atomic step before it is answered, but it
// is answered later, so a window of the store's clock can admit a token the store counted before it. Two
// rules keep that shift to one usable age U = min(maxAgeMs, tokens / refillPerSecond):
// - a token is answered only while its grant is younger than U (age from the start of the grant's call,
//   no later than when the store took it), and
// - a token given back (aged out, evicted, close()) is refunded only as far as the bucket has not
//   refilled since its grant: max(0, unused − refillPerSecond × age), in units, with the age reckoned
//   when the store applies the refund (on the store's clock, from its reading at the grant: a refund
//   queued behind others or held up by a paused server lands as the smaller amount it is by then;
//   a store that reports no clock reading gets the amount as of the refund's sending). A full refund
//   would let tokens pass from lease to lease (refunded by one node, granted to the next, ...), each
//   time usable for another U: every pass can add rate × U to one instant, up to nodes × tokens.
// Then, over any window of length T, admitted ≤ capacity + refillPerSecond × (T + U), and
// refillPerSecond × U ≤ tokens. Proof sketch: the store's level plus each held grant's
// max(0, unused − rate × age) never exceeds capacity (a grant moves tokens from the level to its term,
// a refund at most its term back, and the sum rises only by the refill while no term falls at that
// rate). A window starting at t admits at most the level at t, the tokens held at t that are still
// usable, and rate × T; the usable ones were granted after some τ0 > t − U, and level plus held is at
// most that sum at τ0 plus rate × (t − τ0). (This node's monotonic clock and the store's clock are
// taken to run at the same rate.)
import type { Decision } from '../core/decision.js';
import { floorDiv } from '../core/gcra.js';
import type { ResolvedPolicy } from '../core/policy.js';

/** Hands background work (refills, refunds, a grant's expiry) to the runtime, e.g. a Worker's `ctx.waitUntil`. */
export type WaitUntil = (promise: Promise<unknown>) => void;

export interface Grant {
  tokens: number;
  /** Monotonic ms when the grant's store call started: the store took the tokens no earlier. */
  readonly atMs: number;
  /**
   * The store clock's reading (µs) when it took the tokens, where the store reports it (StepResult.atUs):
   * a refund then carries it, and the store decays the refund when it applies it, however late.
   */
  readonly storeAtUs?: number;
  /** The timer that gives the grant back when it ages out, and the end of its waitUntil promise. */
  timer?: ReturnType<typeof setTimeout>;
  done?: () => void;
}

/** A take waiting for the grant in flight; it is answered from that grant only. */
export interface Waiter {
  readonly cost: number;
  /** A decision, undefined (the store decides it) or, with `error`, the grant's store error. */
  settle(decision: Decision | undefined, error?: unknown): void;
}

export interface Lease {
  readonly policy: ResolvedPolicy;
  /** min(maxAgeMs, tokens / refillPerSecond) in ms: a grant older than this is not answered from. */
  readonly usableMs: number;
  /** Oldest first: takes use the oldest tokens, so the fewest age out. */
  grants: Grant[];
  total: number;
  /** Tokens asked for by the grant in flight (at most one), 0 when none. Counted as held. */
  asking: number;
  waiters: Waiter[];
  /** The sum of the waiters' costs: at most `asking`, so the grant covers them all when the store has the tokens. */
  waiting: number;
  /** When a take last asked for this key (monotonic ms): an empty lease is kept maxAgeMs after it. */
  seenAtMs: number;
  /** The store had no token before this monotonic time: an empty lease refuses locally until then. */
  emptyUntilMs: number;
  /** The bucket's debt in the store's last answer, and when it came (for resetAfterMs). */
  debtUnits: number;
  debtAtMs: number;
  /**
   * The last grant failed or timed out, and the store may have applied it (its tokens are then lost):
   * until a grant succeeds, grants ask only for the takes waiting on them and none runs in the background.
   */
  failed: boolean;
  /** A grant came back after its usable age (the store is too far away): plain takes until this time. */
  plainUntilMs: number;
  /** A grant has landed: from then on grants are sized to the demand (the first asks for `tokens`). */
  granted: boolean;
  /** Tokens asked for on this node in the usable age before `demandAtMs`, and in the one before that. */
  demand: number;
  demandBefore: number;
  demandAtMs: number;
}

export function newLease(policy: ResolvedPolicy, nowMs: number): Lease {
  return {
    policy,
    usableMs: usableAgeMs(policy),
    grants: [],
    total: 0,
    asking: 0,
    waiters: [],
    waiting: 0,
    seenAtMs: nowMs,
    emptyUntilMs: 0,
    debtUnits: 0,
    debtAtMs: 0,
    failed: false,
    plainUntilMs: 0,
    granted: false,
    demand: 0,
    demandBefore: 0,
    demandAtMs: nowMs,
  };
}

/**
 * The usable age U of a policy's leased tokens, in ms: min(maxAgeMs, the time `tokens` take to refill),
 * rounded down to whole µs so that refillPerSecond × U ≤ tokens exactly.
 */
export function usableAgeMs(policy: ResolvedPolicy): number {
  const { tokens, maxAgeMs } = policy.lease!;
  return Math.min(maxAgeMs, floorDiv(tokens * policy.tokenUnits, policy.refillUnitsPerUs) / 1000);
}

/**
 * The units of `grant` that may go back to the store at nowMs: its unused tokens less what the bucket
 * has refilled since the grant's call started (see the bound above), rounded against the refund.
 */
export function refundableUnits(lease: Lease, grant: Grant, nowMs: number): number {
  const { tokenUnits, unitsPerMs } = lease.policy;
  const refilled = Math.ceil(Math.max(0, nowMs - grant.atMs) * unitsPerMs);
  return Math.max(0, grant.tokens * tokenUnits - refilled);
}

/** Counts `cost` tokens asked for on this node (the demand a grant is sized to). */
export function noteDemand(lease: Lease, cost: number, nowMs: number): void {
  const periods = Math.floor((nowMs - lease.demandAtMs) / lease.usableMs);
  if (periods >= 1) {
    lease.demandBefore = periods === 1 ? lease.demand : 0;
    lease.demand = 0;
    lease.demandAtMs += periods * lease.usableMs;
  }
  lease.demand += cost;
}

/**
 * How many tokens are worth holding: `tokens` for a lease's first grant (a key just turned hot: its
 * demand is not known yet), then this node's demand over one usable age (more would age out unused),
 * at least `need` and at most `tokens`. Demand is counted in periods of one usable age; the previous
 * period counts for the share of it that lies within one usable age of now (a sliding window). Called
 * after noteDemand at the same nowMs, so the current period holds nowMs.
 */
export function target(lease: Lease, need: number, nowMs: number): number {
  if (!lease.granted) return lease.policy.lease!.tokens;
  const share = Math.max(0, 1 - (nowMs - lease.demandAtMs) / lease.usableMs);
  return Math.min(lease.policy.lease!.tokens, Math.max(need, Math.ceil(lease.demand + lease.demandBefore * share)));
}

/**
 * The size of a background grant after a take answered from the lease, or 0 for none: the lease holds
 * its low-water share of the target or less, no grant is in flight, the store was not just found empty,
 * and the last grant did not fail. The lease then asks for target − held, so it never holds more than
 * `tokens` (held includes the grant in flight).
 */
export function backgroundAsk(lease: Lease, nowMs: number): number {
  if (lease.asking > 0 || lease.failed || nowMs < lease.emptyUntilMs) return 0;
  const { tokens, lowWater } = lease.policy.lease!;
  const want = target(lease, 1, nowMs);
  if (lease.total > Math.floor((lowWater * want) / tokens)) return 0;
  return Math.max(0, want - lease.total);
}

/**
 * The size of a grant that a take of `cost` (which the lease cannot answer) would wait for, or 0 when
 * it should go to the store instead: the grant alone must cover the take, within `tokens` − held.
 */
export function foregroundAsk(lease: Lease, cost: number, nowMs: number): number {
  const room = lease.policy.lease!.tokens - lease.total;
  const ask = lease.failed ? cost : Math.min(room, target(lease, cost, nowMs));
  return ask >= cost ? ask : 0;
}
