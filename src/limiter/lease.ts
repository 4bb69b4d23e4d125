// Token leases: a node takes up to N tokens of a hot key's bucket from the store in one call (a partial
// grant when fewer exist) and answers later takes on that key from them, with no store call. Below the
// low-water mark it asks for more in the background. Tokens left when a grant ages out (maxAgeMs), when
// the lease is dropped to stay under maxKeys, or on close() go back to the store as a refund, which
// never makes a bucket fuller than full.
//
// Why this never over-admits: every token answered here was first taken from the store by an atomic
// step, and each is answered at most once. The cost is under-admission: tokens sitting in leases are
// unavailable to other nodes, at most nodes × N per key at any instant, and lost (not refunded) when a
// process dies holding them.
import type { BucketDecision, Decision } from '../core/decision.js';
import { debtAfterMs, grantArgs, refundArgs, toDecision } from '../core/gcra.js';
import type { ResolvedPolicy } from '../core/policy.js';
import type { StepArgs, StepResult } from '../store.js';

/** One store call as the limiter makes it (bounded by the policy's timeout, breaker, pending cap). */
export type LeaseStoreCall = (storageKey: string, args: StepArgs, policy: ResolvedPolicy) => Promise<{ ok: true; result: StepResult } | { ok: false; error: unknown }>;

export interface LeaseOptions {
  call: LeaseStoreCall;
  monotonicMs: () => number;
  /** Most keys holding a lease; the least recently granted is refunded beyond it. */
  maxKeys: number;
}

/** Hands background work (refills, refunds) to the runtime, e.g. a Worker's `ctx.waitUntil`. */
export type WaitUntil = (promise: Promise<unknown>) => void;

interface Grant {
  tokens: number;
  /** Monotonic ms when the store granted them. */
  atMs: number;
}

interface Lease {
  policy: ResolvedPolicy;
  /** Oldest first: takes use the oldest tokens, so the ones that age out are the fewest possible. */
  grants: Grant[];
  total: number;
  /** Grants in flight: 0 or 1 (a grant starts only when none is). */
  inFlight: number;
  /** Tokens wanted by takes waiting for the grant in flight; a take it cannot cover goes to the store. */
  wanted: number;
  /** Takes waiting for the next grant to settle, in arrival order; each gets the grant's error, if any. */
  waiters: ((error: unknown) => void)[];
  /** When a take last asked for this key (monotonic ms): an empty lease is kept maxAgeMs after it. */
  seenAtMs: number;
  /** The store had no token before this monotonic time: an empty lease refuses locally until then. */
  emptyUntilMs: number;
  /** The bucket's debt in the store's last answer, and when it came (for resetAfterMs). */
  debtUnits: number;
  debtAtMs: number;
}

export interface Leases {
  /**
   * Answers a take from the key's lease: a Decision at once when it holds the tokens, a Promise when it
   * must wait for a grant, or undefined when a lease cannot answer (cost above the lease size, a
   * reservation with maxWaitMs > 0 on an empty lease, the lease dropped meanwhile, or after close())
   * and the limiter goes to the store as usual. A grant's store error rejects the Promise.
   */
  take(policy: ResolvedPolicy, storageKey: string, cost: number, maxWaitMs: number, waitUntil?: WaitUntil): Decision | Promise<Decision | undefined> | undefined;
  /** Drops the key's lease without a refund (used by reset: the bucket is full again anyway). */
  forget(storageKey: string): void;
  /** Returns every unused token to the store and resolves when the refunds have settled. */
  close(): Promise<void>;
  /** Keys with a lease and tokens they hold. */
  stats(): { keys: number; tokens: number };
}

export function createLeases(options: LeaseOptions): Leases {
  const { call, monotonicMs, maxKeys } = options;
  const leases = new Map<string, Lease>();
  const inFlight = new Set<Promise<unknown>>();
  let closed = false;

  function track(promise: Promise<unknown>, waitUntil?: WaitUntil): void {
    const settled = promise.then(
      () => {},
      () => {},
    );
    inFlight.add(settled);
    void settled.then(() => inFlight.delete(settled));
    if (waitUntil) {
      try {
        waitUntil(settled);
      } catch {
        // A runtime that refuses (e.g. after the response) still lets the promise run as far as it can.
      }
    }
  }

  /** Gives `tokens` back to the bucket (never fuller than full); the store's answer is not needed. */
  function refund(policy: ResolvedPolicy, storageKey: string, tokens: number, waitUntil?: WaitUntil): void {
    if (tokens <= 0) return;
    const args: StepArgs = refundArgs(policy, tokens);
    track(call(storageKey, args, policy), waitUntil);
  }

  /** Moves grants older than maxAgeMs out of the lease and refunds their tokens. */
  function expire(lease: Lease, storageKey: string, now: number, waitUntil?: WaitUntil): void {
    const maxAgeMs = lease.policy.lease!.maxAgeMs;
    let stale = 0;
    while (lease.grants.length > 0 && now - lease.grants[0]!.atMs >= maxAgeMs) stale += lease.grants.shift()!.tokens;
    if (stale > 0) {
      lease.total -= stale;
      refund(lease.policy, storageKey, stale, waitUntil);
    }
  }

  /**
   * Ages out the two leases at the front of the map per decision, so idle keys give their tokens back
   * too. A lease still in use moves to the back; an empty, idle one is dropped.
   */
  function sweep(now: number, waitUntil?: WaitUntil): void {
    let checked = 0;
    for (const [k, lease] of leases) {
      if (++checked > 2) break;
      expire(lease, k, now, waitUntil);
      leases.delete(k);
      const idle = now - lease.seenAtMs >= lease.policy.lease!.maxAgeMs;
      if (lease.total > 0 || lease.inFlight > 0 || now < lease.emptyUntilMs || !idle) leases.set(k, lease);
    }
  }

  function consume(lease: Lease, cost: number): void {
    lease.total -= cost;
    while (cost > 0) {
      const g = lease.grants[0]!;
      const used = Math.min(g.tokens, cost);
      g.tokens -= used;
      cost -= used;
      if (g.tokens === 0) lease.grants.shift();
    }
  }

  /**
   * One grant of up to `tokens` from the store into the lease. When it settles, every waiting take
   * wakes (in arrival order) with the grant's error, if any.
   */
  function grant(lease: Lease, storageKey: string, waitUntil?: WaitUntil): Promise<unknown> {
    lease.inFlight++;
    const settle = (error: unknown) => {
      lease.inFlight--;
      const woken = lease.waiters;
      lease.waiters = [];
      for (const wake of woken) wake(error);
      return error;
    };
    return applyGrant(lease, storageKey, monotonicMs(), waitUntil).then(settle, settle);
  }

  async function applyGrant(lease: Lease, storageKey: string, started: number, waitUntil?: WaitUntil): Promise<unknown> {
    const { policy } = lease;
    const n = policy.lease!.tokens;
    const args: StepArgs = grantArgs(policy, n);
    const outcome = await call(storageKey, args, policy);
    const now = monotonicMs();
    if (!outcome.ok) return outcome.error;
    const { result } = outcome;
    lease.debtUnits = result.debtUnits;
    lease.debtAtMs = now;
    const units = result.tokens ?? 0;
    // Fewer than asked for: the store is empty now. No token exists there before this time, so an
    // empty lease refuses locally until then instead of asking again.
    if (units < n) lease.emptyUntilMs = now + toDecision(policy, 1, { allowed: false, debtUnits: result.debtUnits }).retryAfterMs;
    if (units === 0) return undefined;
    if (closed || leases.get(storageKey) !== lease) {
      // The lease was dropped (reset, eviction, close) while this grant was in flight: give them back.
      refund(policy, storageKey, units, waitUntil);
    } else {
      // Aged from when the call started: the store took them no earlier than that.
      lease.grants.push({ tokens: units, atMs: started });
      lease.total += units;
    }
    return undefined;
  }

  /**
   * An answer from the lease: the store's last debt advanced by the time since (as the deny cache does),
   * with this node's view of `remaining`. Leased tokens are never a reservation, so there is no wait.
   */
  function localDecision(lease: Lease, now: number, allowed: boolean, retryAfterMs: number): BucketDecision {
    const debtUnits = debtAfterMs(lease.debtUnits, now - lease.debtAtMs, lease.policy.unitsPerMs);
    return { ...toDecision(lease.policy, 1, { allowed, debtUnits }), remaining: lease.total, retryAfterMs, waitMs: 0, reason: 'lease' };
  }

  /** Takes `cost` from the lease if it holds them (starting a background grant at the low-water mark). */
  function fromLease(lease: Lease, storageKey: string, cost: number, now: number, waitUntil?: WaitUntil): Decision | undefined {
    if (lease.total < cost) return undefined;
    consume(lease, cost);
    if (lease.total <= lease.policy.lease!.lowWater && lease.inFlight === 0 && now >= lease.emptyUntilMs) {
      track(grant(lease, storageKey, waitUntil), waitUntil);
    }
    return localDecision(lease, now, true, 0);
  }

  /** The key's lease; a key seen for the first time gets an empty one and is decided by the store. */
  function getLease(policy: ResolvedPolicy, storageKey: string, now: number, waitUntil?: WaitUntil): Lease | undefined {
    let lease = leases.get(storageKey);
    if (lease) lease.seenAtMs = now;
    if (!lease) {
      if (leases.size >= maxKeys) {
        // Drop the oldest lease; its tokens go back to the store.
        const [k, old] = leases.entries().next().value!;
        leases.delete(k);
        refund(old.policy, k, old.total, waitUntil);
      }
      lease = { policy, grants: [], total: 0, inFlight: 0, wanted: 0, waiters: [], seenAtMs: now, emptyUntilMs: 0, debtUnits: 0, debtAtMs: 0 };
      leases.set(storageKey, lease);
      // Only a key asked for again within maxAgeMs (while its empty lease is kept) is hot: a key seen once costs
      // one plain store call, as without leases, and no grant or refund.
      return undefined;
    }
    return lease;
  }

  /**
   * Waits for a grant when the lease is empty: the first take starts one, and later takes wait for it
   * while the grants in flight can cover them. A take they cannot cover goes to the store directly
   * (undefined), so no take waits on a queue of grants: at most about one store round trip, as without
   * leases. If the grant leaves too few tokens, the store was dry: a refusal, as a take would have been.
   */
  async function afterGrant(lease: Lease, storageKey: string, cost: number, maxWaitMs: number, waitUntil?: WaitUntil): Promise<Decision | undefined> {
    const { policy } = lease;
    const n = policy.lease!.tokens;
    if (lease.inFlight === 0) track(grant(lease, storageKey, waitUntil), waitUntil);
    else if (lease.wanted + cost > lease.total + n) return undefined; // the grant in flight brings at most n
    lease.wanted += cost;
    let error: unknown;
    try {
      error = await new Promise<unknown>((resolve) => lease.waiters.push(resolve));
    } finally {
      lease.wanted -= cost;
    }
    if (closed || leases.get(storageKey) !== lease) return undefined;
    if (lease.total >= cost) {
      consume(lease, cost);
      // This take waited for the store: it carries the store's numbers, not the lease's reason.
      const d = toDecision(policy, cost, { allowed: true, debtUnits: lease.debtUnits });
      return { ...d, remaining: lease.total };
    }
    if (error !== undefined) throw error;
    // Takes that waited with this one used the grant up, but the store was not dry: it decides this one.
    if (monotonicMs() >= lease.emptyUntilMs || maxWaitMs > 0) return undefined;
    const d = toDecision(policy, cost - lease.total, { allowed: false, debtUnits: lease.debtUnits });
    return { ...d, remaining: lease.total };
  }

  return {
    take(policy, storageKey, cost, maxWaitMs, waitUntil) {
      const settings = policy.lease!;
      if (closed || cost > settings.tokens) return undefined;
      const now = monotonicMs();
      sweep(now, waitUntil);
      const lease = getLease(policy, storageKey, now, waitUntil);
      if (!lease) return undefined;
      expire(lease, storageKey, now, waitUntil);
      const hit = fromLease(lease, storageKey, cost, now, waitUntil);
      if (hit) return hit;
      if (lease.inFlight === 0 && now < lease.emptyUntilMs) {
        // A reservation goes to the store, which orders reservations FIFO across nodes.
        if (maxWaitMs > 0) return undefined;
        // The store said no token exists before emptyUntilMs: refuse locally, like the deny cache.
        return localDecision(lease, now, false, Math.max(1, Math.ceil(lease.emptyUntilMs - now)));
      }
      return afterGrant(lease, storageKey, cost, maxWaitMs, waitUntil);
    },
    forget(storageKey) {
      leases.delete(storageKey);
    },
    async close() {
      closed = true;
      for (const [k, lease] of leases) refund(lease.policy, k, lease.total);
      leases.clear();
      while (inFlight.size > 0) await Promise.all(inFlight);
    },
    stats() {
      let tokens = 0;
      for (const lease of leases.values()) tokens += lease.total;
      return { keys: leases.size, tokens };
    },
  };
}
