// Lease refunds on their way to the store: at most `concurrency` in flight, the rest queued in order.
// They are background calls (outside maxPendingStoreCalls, which bounds decisions), so close() with
// 10,000 leased keys sends every refund, 32 at a time, instead of the first 1,024 and dropping the rest.
import type { ResolvedPolicy } from '../core/policy.js';
import type { StepArgs } from '../store.js';
import type { WaitUntil } from './lease-state.js';

export type RefundCall = (storageKey: string, args: StepArgs, policy: ResolvedPolicy) => Promise<unknown>;

/**
 * A refund's arguments, made when its call starts (not when it is queued), so a refund decayed on this
 * node's clock is decayed up to its sending; undefined: nothing is worth sending any more.
 */
export type RefundArgs = () => StepArgs | undefined;

export interface Refunds {
  /**
   * Queues one refund; `waitUntil` (a Worker's) is handed the promise of its answer, and `landed` is
   * called once it has been answered (or has failed).
   */
  send(storageKey: string, args: RefundArgs, policy: ResolvedPolicy, waitUntil?: WaitUntil, landed?: () => void): void;
  /** Resolves when every refund queued so far, and any queued meanwhile, has been answered. */
  drain(): Promise<void>;
  /** Refunds queued or in flight. */
  size(): number;
}

interface Queued {
  storageKey: string;
  args: RefundArgs;
  policy: ResolvedPolicy;
  done(): void;
}

export const REFUND_CONCURRENCY = 32;

export function createRefunds(call: RefundCall, concurrency = REFUND_CONCURRENCY): Refunds {
  const queue: Queued[] = [];
  let head = 0;
  let active = 0;
  let idle: (() => void)[] = [];

  function next(): void {
    while (active < concurrency && head < queue.length) {
      const q = queue[head]!;
      queue[head++] = undefined as unknown as Queued;
      const args = q.args();
      if (args === undefined) {
        q.done();
        continue;
      }
      active++;
      // A refund's answer is not needed, and its failure is the store's (the caller reports outages).
      void call(q.storageKey, args, q.policy)
        .catch(() => {})
        .then(() => {
          active--;
          q.done();
          next();
        });
    }
    if (head === queue.length) {
      queue.length = 0;
      head = 0;
      if (active === 0) {
        const waiting = idle;
        idle = [];
        for (const resolve of waiting) resolve();
      }
    }
  }

  return {
    send(storageKey, args, policy, waitUntil, landed) {
      let resolve!: () => void;
      const answered = new Promise<void>((r) => (resolve = r));
      const done = () => {
        landed?.();
        resolve();
      };
      queue.push({ storageKey, args, policy, done });
      if (waitUntil) {
        try {
          waitUntil(answered);
        } catch {
          // A runtime that refuses (after the response) still lets the refund run as far as it can.
        }
      }
      next();
    },
    drain() {
      if (active === 0 && head === queue.length) return Promise.resolve();
      return new Promise<void>((resolve) => idle.push(resolve));
    },
    size: () => active + queue.length - head,
  };
}
