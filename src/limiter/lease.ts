// Token leases: a node takes tokens of a hot key's bucket from the store in one call (a partial grant
// when fewer exist) and answers later takes on that key from them, with no store call. Grants are sized
// to this node's demand over one usable age and keep what it holds (grant in flight included) at most
// `tokens`; at the low-water mark one runs in the background. A grant is answered from only while
// younger than its usable age; then, or when the lease is dropped (maxKeys, close()), what the bucket
// has not refilled since goes back as a refund. lease-state.ts states the bound this keeps and why.
//
// No take waits for more than one store call: a take the lease cannot answer either waits for the one
// grant in flight, which is sized to cover every take waiting on it, or goes to the store at once.
import type { BucketDecision, Decision } from '../core/decision.js';
import { debtAfterMs, grantArgs, refundArgs, toDecision } from '../core/gcra.js';
import type { ResolvedPolicy } from '../core/policy.js';
import type { StepArgs, StepResult } from '../store.js';
import { backgroundAsk, foregroundAsk, newLease, noteDemand, refundableUnits, type Grant, type Lease, type WaitUntil } from './lease-state.js';
import { createRefunds } from './refunds.js';

export type { WaitUntil };

/** One store call as the limiter makes it; `background` calls (refunds) are outside maxPendingStoreCalls. */
export type LeaseStoreCall = (
  storageKey: string,
  args: StepArgs,
  policy: ResolvedPolicy,
  background?: boolean,
) => Promise<{ ok: true; result: StepResult } | { ok: false; error: unknown }>;

export interface LeaseOptions {
  call: LeaseStoreCall;
  monotonicMs: () => number;
  /** Most keys holding a lease; the least recently granted is refunded beyond it. */
  maxKeys: number;
  /** Called when this node gives tokens back to a key (the deny cache forgets its refusal of the key). */
  onRefund?: (storageKey: string) => void;
}

export interface Leases {
  /**
   * Answers a take from the key's lease: a Decision at once when it holds the tokens, a Promise when it
   * waits for a grant, or undefined when the store must decide (a key's first take, a cost above the
   * lease size, a reservation the lease cannot answer, a take the grant in flight cannot cover, after
   * close()). A grant's store error rejects the Promise.
   */
  take(policy: ResolvedPolicy, storageKey: string, cost: number, maxWaitMs: number, waitUntil?: WaitUntil): Decision | Promise<Decision | undefined> | undefined;
  /** Drops the key's lease without a refund (used by reset: the bucket is full again anyway). */
  forget(storageKey: string): void;
  /**
   * Drops the key's lease and gives its tokens back (a change of the key's limits or a block through this
   * limiter: tokens granted under the old numbers are not answered from again).
   */
  release(storageKey: string): void;
  /** release() for every key whose storage key starts with `prefix` (a policy-wide change). */
  releaseAll(prefix: string): void;
  /** Gives every unused token back and resolves when the grants in flight and all refunds have settled. */
  close(): Promise<void>;
  /** Keys with a lease and tokens they hold. */
  stats(): { keys: number; tokens: number };
}

export function createLeases(options: LeaseOptions): Leases {
  const { call, monotonicMs, maxKeys, onRefund } = options;
  const leases = new Map<string, Lease>();
  const grantsInFlight = new Set<Promise<void>>();
  const refunds = createRefunds((key, args, policy) => call(key, args, policy, true));
  let closed = false;

  /** Stops a grant's expiry timer and ends its waitUntil promise. */
  function release(grant: Grant): void {
    clearTimeout(grant.timer);
    grant.timer = undefined;
    grant.done?.();
    grant.done = undefined;
  }

  /**
   * Gives `grants` (already out of the lease) back: what the bucket has not refilled since each, in
   * units (a refund step never makes the bucket fuller than full), when that is at least a token. A grant
   * with the store's clock reading goes back as its own refund, which the store decays when it applies
   * it; the others as one, decayed on this node's clock when it is sent.
   */
  function refund(lease: Lease, storageKey: string, grants: Grant[], now: number, waitUntil?: WaitUntil): void {
    const { policy } = lease;
    const unclocked: Grant[] = [];
    for (const g of grants) {
      release(g);
      // Less than a token is not worth a store call (giving back less is always safe). This node's
      // estimate, from the start of the grant's call, is never more than the store would give back now.
      if (refundableUnits(lease, g, now) < policy.tokenUnits) continue;
      if (g.storeAtUs === undefined) unclocked.push(g);
      else send(lease, storageKey, () => refundArgs(policy, g.tokens * policy.tokenUnits, g.storeAtUs), waitUntil);
    }
    if (unclocked.length === 0) return;
    send(
      lease,
      storageKey,
      () => {
        const t = monotonicMs();
        const units = unclocked.reduce((sum, g) => sum + refundableUnits(lease, g, t), 0);
        return units >= policy.tokenUnits ? refundArgs(policy, units) : undefined;
      },
      waitUntil,
    );
  }

  /**
   * Queues one refund. This node's deny cache forgets the key when it is queued and again when it lands,
   * so no refusal decided before the refund was applied stays cached after it.
   */
  function send(lease: Lease, storageKey: string, args: () => StepArgs | undefined, waitUntil?: WaitUntil): void {
    onRefund?.(storageKey);
    refunds.send(storageKey, args, lease.policy, waitUntil, onRefund ? () => onRefund(storageKey) : undefined);
  }

  /** Takes the grants that reached their usable age out of the lease, and gives them back. */
  function expire(lease: Lease, storageKey: string, now: number, waitUntil?: WaitUntil): void {
    let n = 0;
    while (n < lease.grants.length && now - lease.grants[n]!.atMs >= lease.usableMs) n++;
    if (n === 0) return;
    const aged = lease.grants.splice(0, n);
    for (const g of aged) lease.total -= g.tokens;
    refund(lease, storageKey, aged, now, waitUntil);
  }

  /** Drops a lease from the map, giving back what it holds (a grant in flight refunds when it lands). */
  function drop(storageKey: string, lease: Lease, now: number, waitUntil?: WaitUntil): void {
    leases.delete(storageKey);
    const held = lease.grants;
    lease.grants = [];
    lease.total = 0;
    refund(lease, storageKey, held, now, waitUntil);
  }

  /**
   * Adds a grant, with a timer (unref'd: it never keeps a process alive) that gives it back when it
   * ages out, so an idle node returns it on time. When that refund can hold tokens (maxAgeMs shorter
   * than the time `tokens` take to refill; otherwise the bucket has refilled them by then) the request
   * that made the grant is kept until then through its waitUntil, which is how a Worker runs it.
   */
  function addGrant(lease: Lease, storageKey: string, tokens: number, atMs: number, storeAtUs: number | undefined, now: number, waitUntil?: WaitUntil): void {
    const grant: Grant = storeAtUs === undefined ? { tokens, atMs } : { tokens, atMs, storeAtUs };
    lease.grants.push(grant);
    lease.total += tokens;
    const fire = () => {
      grant.timer = undefined;
      const t = monotonicMs();
      if (leases.get(storageKey) === lease && lease.grants.includes(grant)) {
        // A timer may fire a little early on the monotonic clock: wait for the rest.
        if (t - atMs < lease.usableMs) return void arm(Math.ceil(atMs + lease.usableMs - t));
        expire(lease, storageKey, t, waitUntil);
      }
      release(grant);
    };
    const arm = (ms: number) => {
      grant.timer = setTimeout(fire, Math.max(0, ms));
      (grant.timer as { unref?: () => void }).unref?.();
    };
    arm(Math.ceil(atMs + lease.usableMs - now));
    if (waitUntil && refundableUnits(lease, grant, atMs + lease.usableMs) >= lease.policy.tokenUnits) {
      try {
        waitUntil(new Promise<void>((resolve) => (grant.done = resolve)));
      } catch {
        grant.done = undefined;
      }
    }
  }

  /**
   * Ages out the two leases at the front of the map per decision, so a map of idle keys empties too. A
   * lease still in use moves to the back; an empty, idle one is dropped.
   */
  function sweep(now: number, waitUntil?: WaitUntil): void {
    let checked = 0;
    for (const [k, lease] of leases) {
      if (++checked > 2) break;
      expire(lease, k, now, waitUntil);
      leases.delete(k);
      const idle = now - lease.seenAtMs >= lease.policy.lease!.maxAgeMs;
      if (lease.total > 0 || lease.asking > 0 || now < lease.emptyUntilMs || now < lease.plainUntilMs || !idle) leases.set(k, lease);
    }
  }

  function consume(lease: Lease, cost: number): void {
    lease.total -= cost;
    while (cost > 0) {
      const g = lease.grants[0]!;
      const used = Math.min(g.tokens, cost);
      g.tokens -= used;
      cost -= used;
      if (g.tokens === 0) release(lease.grants.shift()!);
    }
  }

  /** Starts the key's one grant in flight, of `ask` tokens. */
  function startGrant(lease: Lease, storageKey: string, ask: number, waitUntil?: WaitUntil): void {
    const { policy } = lease;
    lease.asking = ask;
    const started = monotonicMs();
    const settled = call(storageKey, grantArgs(policy, ask), policy).then((outcome) => {
      grantsInFlight.delete(settled);
      landed(lease, storageKey, ask, started, outcome, waitUntil);
    });
    grantsInFlight.add(settled);
    if (waitUntil) {
      try {
        waitUntil(settled);
      } catch {
        // A runtime that refuses still lets the grant run as far as it can.
      }
    }
  }

  /** A grant's answer: the tokens join the lease, and every take waiting on it is answered, in order. */
  function landed(lease: Lease, storageKey: string, ask: number, started: number, outcome: Awaited<ReturnType<LeaseStoreCall>>, waitUntil?: WaitUntil): void {
    const { policy } = lease;
    const waiters = lease.waiters;
    lease.waiters = [];
    lease.waiting = 0;
    lease.asking = 0;
    const now = monotonicMs();
    if (!outcome.ok) {
      // The store may have applied it (a timeout after Redis ran the script): those tokens are lost, so
      // until a grant succeeds this lease asks only for the takes that wait on it.
      lease.failed = true;
      for (const w of waiters) w.settle(undefined, outcome.error);
      return;
    }
    lease.failed = false;
    const r = outcome.result;
    if (r.blockedUntilUs !== undefined || r.limits !== undefined) {
      // The key is blocked, or under a runtime change's numbers, not the policy's the lease is sized in:
      // no lease for it. What the grant took goes back, and its takes go to the store for maxAgeMs (the
      // store refuses a blocked key's, and decides the others under the numbers in force).
      if (leases.get(storageKey) === lease) {
        const held = lease.grants;
        lease.grants = [];
        lease.total = 0;
        refund(lease, storageKey, held, now, waitUntil);
        lease.plainUntilMs = now + policy.lease!.maxAgeMs;
      }
      if ((r.tokens ?? 0) > 0) refund(lease, storageKey, [{ tokens: r.tokens!, atMs: started, storeAtUs: r.atUs }], now, waitUntil);
      for (const w of waiters) w.settle(undefined);
      return;
    }
    lease.granted = true;
    // A leased policy has one limit.
    const debtUnits = outcome.result.debtUnits[0]!;
    lease.debtUnits = debtUnits;
    lease.debtAtMs = now;
    const got = outcome.result.tokens ?? 0;
    // Fewer than asked for: the store is empty now, and no token exists there before this time.
    if (got < ask) lease.emptyUntilMs = now + toDecision(policy, 1, { allowed: false, debtUnits: [debtUnits] }).retryAfterMs;
    const live = !closed && leases.get(storageKey) === lease;
    // An answer that came after the usable age cannot be answered from (a store further away than that).
    const fresh = now - started < lease.usableMs;
    if (live && fresh) {
      if (got > 0) addGrant(lease, storageKey, got, started, outcome.result.atUs, now, waitUntil);
    } else {
      // Dropped meanwhile (reset, eviction, close), or too late: the store decides the waiting takes. A
      // store further away than the usable age makes the lease useless (each grant would age out on
      // arrival): the key's takes go to the store for maxAgeMs, then it may lease again.
      if (live) {
        const held = lease.grants;
        lease.grants = [];
        lease.total = 0;
        refund(lease, storageKey, held, now, waitUntil);
        lease.plainUntilMs = now + policy.lease!.maxAgeMs;
      }
      if (got > 0) refund(lease, storageKey, [{ tokens: got, atMs: started, storeAtUs: outcome.result.atUs }], now, waitUntil);
      for (const w of waiters) w.settle(undefined);
      return;
    }
    for (const w of waiters) {
      if (lease.total >= w.cost) {
        consume(lease, w.cost);
        // This take waited for the store: it carries the store's numbers, not the lease's reason.
        w.settle({ ...toDecision(policy, w.cost, { allowed: true, debtUnits: [debtUnits] }), remaining: lease.total });
      } else {
        // The grant was short: the store is empty, and this take is refused as a store call would be.
        w.settle({ ...toDecision(policy, w.cost - lease.total, { allowed: false, debtUnits: [debtUnits] }), remaining: lease.total });
      }
    }
  }

  function wait(lease: Lease, cost: number): Promise<Decision | undefined> {
    lease.waiting += cost;
    return new Promise((resolve, reject) => {
      lease.waiters.push({ cost, settle: (decision, error) => (error === undefined ? resolve(decision) : reject(error)) });
    });
  }

  /**
   * An answer from the lease: the store's last debt advanced by the time since (as the deny cache does),
   * with this node's view of `remaining`. Leased tokens are never a reservation, so there is no wait.
   */
  function localDecision(lease: Lease, now: number, allowed: boolean, retryAfterMs: number): BucketDecision {
    const debtUnits = debtAfterMs(lease.debtUnits, now - lease.debtAtMs, lease.policy.unitsPerMs);
    return { ...toDecision(lease.policy, 1, { allowed, debtUnits: [debtUnits] }), remaining: lease.total, retryAfterMs, waitMs: 0, reason: 'lease' };
  }

  return {
    take(policy, storageKey, cost, maxWaitMs, waitUntil) {
      if (closed || cost > policy.lease!.tokens) return undefined;
      const now = monotonicMs();
      sweep(now, waitUntil);
      const lease = leases.get(storageKey);
      if (!lease) {
        // Only a key asked for again within maxAgeMs (while its empty lease is kept) is hot: a key seen
        // once costs one plain store call, as without leases, and no grant or refund.
        if (leases.size >= maxKeys) {
          const [k, oldest] = leases.entries().next().value!;
          drop(k, oldest, now, waitUntil);
        }
        const fresh = newLease(policy, now);
        noteDemand(fresh, cost, now);
        leases.set(storageKey, fresh);
        return undefined;
      }
      lease.seenAtMs = now;
      if (now < lease.plainUntilMs) return undefined;
      noteDemand(lease, cost, now);
      expire(lease, storageKey, now, waitUntil);
      if (lease.total >= cost) {
        consume(lease, cost);
        const ask = backgroundAsk(lease, now);
        if (ask > 0) startGrant(lease, storageKey, ask, waitUntil);
        return localDecision(lease, now, true, 0);
      }
      // A reservation goes to the store, which orders reservations FIFO across nodes.
      if (maxWaitMs > 0) return undefined;
      if (lease.asking > 0) {
        // Wait for the grant in flight only if it covers this take too; otherwise the store decides it
        // now, so no take waits on a queue of grants.
        return lease.waiting + cost <= lease.asking ? wait(lease, cost) : undefined;
      }
      if (now < lease.emptyUntilMs) {
        // The store said no token exists before emptyUntilMs: refuse locally, like the deny cache.
        return localDecision(lease, now, false, Math.max(1, Math.ceil(lease.emptyUntilMs - now)));
      }
      const ask = foregroundAsk(lease, cost, now);
      if (ask === 0) return undefined;
      startGrant(lease, storageKey, ask, waitUntil);
      return wait(lease, cost);
    },
    forget(storageKey) {
      const lease = leases.get(storageKey);
      if (!lease) return;
      leases.delete(storageKey);
      for (const g of lease.grants) release(g);
    },
    release(storageKey) {
      const lease = leases.get(storageKey);
      if (lease) drop(storageKey, lease, monotonicMs());
    },
    releaseAll(prefix) {
      const now = monotonicMs();
      for (const [k, lease] of [...leases]) if (k.startsWith(prefix)) drop(k, lease, now);
    },
    async close() {
      closed = true;
      const now = monotonicMs();
      for (const [k, lease] of [...leases]) drop(k, lease, now);
      // Grants in flight refund what they bring when they land; then every refund is sent.
      while (grantsInFlight.size > 0) await Promise.all(grantsInFlight);
      await refunds.drain();
    },
    stats() {
      // Usable tokens: a grant past its usable age is no longer answered from (its timer drops it).
      const now = monotonicMs();
      let tokens = 0;
      for (const lease of leases.values()) for (const g of lease.grants) if (now - g.atMs < lease.usableMs) tokens += g.tokens;
      return { keys: leases.size, tokens };
    },
  };
}
