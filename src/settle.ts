// The pre-check with settlement: reserve an estimate, do the costly work, then settle by what it really
// cost, e.g. an LLM call charged by its usage.total_tokens. Works with the library's limiter and with the
// permit endpoint's PermitClient alike (both can acquire and adjust).
import type { Decision } from './core/decision.js';
import type { Cost } from './core/key.js';
import { StoreError } from './errors.js';

/** What settle needs: a limiter (createLimiter) or a PermitClient. */
export interface Settles {
  acquire(policy: string, key: string, options?: { cost?: Cost; timeoutMs?: number; signal?: AbortSignal }): Promise<Decision>;
  adjust(policy: string, key: string, cost: Cost): Promise<Decision>;
}

/** What settle reserves and settles: the policy and key, the estimated cost, and how to read the actual cost from the work's result. */
export interface SettleOptions<T> {
  policy: string;
  key: string;
  /** What is reserved before the work: a number (every limit) or per limit, `{ requests: 1, tokens: 1000 }`. */
  estimate: Cost;
  /** What the work really cost, from its result, in the same form as `estimate`. */
  actual: (result: T) => Cost;
  /** The longest wait for the estimate's permit, in ms. @default 30000 */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** actual - estimate, per limit (a limit named by only one side counts 0 on the other); undefined when nothing differs. */
export function costDifference(actual: Cost, estimate: Cost): Cost | undefined {
  if (typeof actual === 'number' && typeof estimate === 'number') return actual === estimate ? undefined : actual - estimate;
  if (typeof actual === 'number' || typeof estimate === 'number') {
    throw new TypeError('[edge-limiter] settle: `estimate` and `actual` must both be numbers or both be objects of tokens per limit');
  }
  const diff: Record<string, number> = {};
  for (const name of new Set([...Object.keys(actual), ...Object.keys(estimate)])) {
    const d = (actual[name] ?? 0) - (estimate[name] ?? 0);
    if (d !== 0) diff[name] = d;
  }
  return Object.keys(diff).length === 0 ? undefined : diff;
}

const negate = (cost: Cost): Cost => (typeof cost === 'number' ? -cost : Object.fromEntries(Object.entries(cost).map(([k, v]) => [k, -v])));

/**
 * Reserves `estimate` (acquire: one reservation, then a sleep until it is due; rejects with
 * AcquireTimeoutError, consuming nothing, when it cannot be had within timeoutMs), runs `work`, then
 * settles the difference between `actual(result)` and the estimate in one adjust: a refund when the
 * work cost less, a charge (possibly a debt that later takes wait out) when it cost more. When `work`
 * throws, the whole estimate is refunded and the work's error rethrown (if that refund fails too, the
 * estimate stays charged, and the work's error is still the one thrown). So is it when `actual` throws
 * or gives a cost that cannot be settled (another form than the estimate's, or one the limiter refuses).
 *
 * A permit the store did not decide (the store failed and the policy's fail mode admitted it: reason
 * `store_error` or `local`) charged the store nothing, so nothing is settled against the store for it:
 * settling would refund tokens the store never took, or charge only part of the work.
 */
export async function settle<T>(limiter: Settles, options: SettleOptions<T>, work: () => Promise<T>): Promise<T> {
  const { policy, key, estimate } = options;
  const permit = await limiter.acquire(policy, key, { cost: estimate, timeoutMs: options.timeoutMs ?? 30_000, ...(options.signal ? { signal: options.signal } : {}) });
  const charged = permit.reason !== 'store_error' && permit.reason !== 'local';
  let result: T;
  try {
    result = await work();
  } catch (err) {
    if (charged) await limiter.adjust(policy, key, negate(estimate)).catch(() => {});
    throw err;
  }
  if (!charged) return result;
  let diff: Cost | undefined;
  try {
    diff = costDifference(options.actual(result), estimate);
    if (diff !== undefined) await limiter.adjust(policy, key, diff);
  } catch (err) {
    // An actual cost that cannot be settled (its form is not the estimate's, or the limiter refuses it as
    // input) must not leave the estimate charged for work it does not describe: refund it, as when the
    // work fails. A store that failed the adjustment is not asked again.
    if (!(err instanceof StoreError)) await limiter.adjust(policy, key, negate(estimate)).catch(() => {});
    throw err;
  }
  return result;
}
