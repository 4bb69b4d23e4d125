// The pre-check with settlement: reserve an estimate, do the costly work, then settle by what it really
// cost, e.g. an LLM call charged by its usage.total_tokens. Works with the library's limiter and with the
// permit endpoint's PermitClient alike: both acquire with an idempotency key and settle that charge.
import type { Decision } from './core/decision.js';
import type { Cost } from './core/key.js';
import { InvalidInputError } from './errors.js';

/** What settle needs: a limiter (createLimiter) or a PermitClient. */
export interface Settles {
  acquire(policy: string, key: string, options?: { cost?: Cost; timeoutMs?: number; signal?: AbortSignal; idempotencyKey?: string }): Promise<Decision>;
  /** A settlement bounded by the charge (limiter.settle, PermitClient.settle). */
  settle(policy: string, key: string, options: { charge: string; cost: Cost }): Promise<Decision>;
}

/**
 * A settlement settle() could not apply (the store or the permit service failed, or the charge is no
 * longer known: the work outlasted the idempotency window). The work's result was returned all the same;
 * `retry()` sends the same settlement again, which is safe: a charge is settled at most once.
 */
export interface SettleFailure {
  policy: string;
  key: string;
  /** The charge: the idempotency key settle() sent with its acquire (crypto.randomUUID()). */
  charge: string;
  /** The actual cost it was to be settled at (0 when the work failed: the whole estimate back). */
  cost: Cost;
  error: unknown;
  /** Sends the same settlement again (limiter.settle or PermitClient.settle with this charge and cost). */
  retry(): Promise<Decision>;
}

/** What settle reserves and settles: the policy and key, the estimated cost, and how to read the actual cost from the work's result. */
export interface SettleOptions<T> {
  policy: string;
  key: string;
  /** What is reserved before the work: a number (every limit) or per limit, `{ requests: 1, tokens: 1000 }`. */
  estimate: Cost;
  /** What the work really cost, from its result, in the same form as `estimate` (each at least 0). */
  actual: (result: T) => Cost;
  /**
   * The longest wait for the estimate's permit, in ms (acquire's timeoutMs): beyond it settle rejects
   * with AcquireTimeoutError, the work is not run, and nothing is consumed. It does not bound the work.
   * @default 30000
   */
  timeoutMs?: number;
  signal?: AbortSignal;
  /**
   * Called when the settlement after the work fails; the work's result (or its error) goes to the caller
   * all the same. Errors it throws are ignored. Default: one `console.warn` line naming the policy, key,
   * charge and cost, so a lost settlement is never silent.
   */
  onSettleError?: (failure: SettleFailure) => void;
}

/** actual - estimate, per limit (a limit named by only one side counts 0 on the other); undefined when nothing differs. */
export function costDifference(actual: Cost, estimate: Cost): Cost | undefined {
  if (typeof actual === 'number' && typeof estimate === 'number') return actual === estimate ? undefined : actual - estimate;
  sameForm(actual, estimate);
  const diff: Record<string, number> = {};
  const a = actual as Record<string, number>;
  const e = estimate as Record<string, number>;
  for (const name of new Set([...Object.keys(a), ...Object.keys(e)])) {
    const d = (a[name] ?? 0) - (e[name] ?? 0);
    if (d !== 0) diff[name] = d;
  }
  return Object.keys(diff).length === 0 ? undefined : diff;
}

function sameForm(actual: Cost, estimate: Cost): void {
  if ((typeof actual === 'number') !== (typeof estimate === 'number')) {
    throw new TypeError('[edge-limiter] settle: `estimate` and `actual` must both be numbers or both be objects of tokens per limit');
  }
}

/** A cost of 0 in the estimate's form: the whole charge back. */
const nothing = (estimate: Cost): Cost => (typeof estimate === 'number' ? 0 : {});

/**
 * Reserves `estimate` (acquire with a fresh idempotency key, which names the charge; one reservation,
 * then a sleep until it is due; rejects with AcquireTimeoutError, consuming nothing, when it cannot be
 * had within timeoutMs), runs `work`, then settles that charge by `actual(result)` (limiter.settle): a
 * refund when the work cost less, never more than the estimate charged, and a charge (possibly a debt
 * that later takes wait out) when it cost more. When `work` throws, the charge is settled at 0 (the
 * whole estimate back) and the work's error is rethrown. So is it when `actual` throws or gives a cost
 * the limiter refuses as input (below 0, a fraction, another form than the estimate's): the estimate
 * goes back and that error is the caller's.
 *
 * When the settlement itself fails (the store or the permit service is down, or the work outlasted the
 * idempotency window), settle does not lose the work: it resolves with the result, and reports the
 * failed settlement to `onSettleError` (by default one console.warn line), whose `retry()` sends the
 * same settlement again, at most once applied. The charge then stays as estimated until it is.
 *
 * A permit the store did not decide (the store failed and the policy's fail mode admitted it: reason
 * `store_error` or `local`) charged the store nothing, so nothing is settled for it.
 */
export async function settle<T>(limiter: Settles, options: SettleOptions<T>, work: () => Promise<T>): Promise<T> {
  const { policy, key, estimate } = options;
  const charge = crypto.randomUUID();
  const permit = await limiter.acquire(policy, key, { cost: estimate, timeoutMs: options.timeoutMs ?? 30_000, idempotencyKey: charge, ...(options.signal ? { signal: options.signal } : {}) });
  const charged = permit.reason !== 'store_error' && permit.reason !== 'local';
  const settleAt = (cost: Cost) => limiter.settle(policy, key, { charge, cost });
  /** A settlement that failed goes to onSettleError (or one warning line), never to the caller. */
  const report = (cost: Cost, error: unknown) => {
    const failure: SettleFailure = { policy, key, charge, cost, error, retry: () => settleAt(cost) };
    try {
      if (options.onSettleError) options.onSettleError(failure);
      else console.warn(JSON.stringify({ msg: '[edge-limiter] settle: the settlement was not applied; the charge stays as estimated', policy, key, charge, cost, error: error instanceof Error ? error.message : String(error) }));
    } catch {
      // A reporting hook must never cost the caller the work's result.
    }
  };
  const settleOrReport = (cost: Cost) => settleAt(cost).then(() => undefined, (error: unknown) => report(cost, error));
  let result: T;
  try {
    result = await work();
  } catch (err) {
    if (charged) await settleOrReport(nothing(estimate));
    throw err;
  }
  if (!charged) return result;
  let cost: Cost;
  try {
    cost = options.actual(result);
    sameForm(cost, estimate);
  } catch (err) {
    // An actual cost that cannot be read must not leave the estimate charged for work it does not describe.
    await settleOrReport(nothing(estimate));
    throw err;
  }
  try {
    await settleAt(cost);
  } catch (err) {
    if (err instanceof InvalidInputError) {
      // A cost the limiter refuses (below 0, a fraction): the caller's error, and the estimate goes back.
      await settleOrReport(nothing(estimate));
      throw err;
    }
    report(cost, err);
  }
  return result;
}
