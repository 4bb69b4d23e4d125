// Client SDK for the permit endpoint: fetch only, so it runs on Workers, Lambda, Node and browsers.
import type { Decision } from '../core/decision.js';
import { assertIdempotencyKey, assertKey, MAX_PERMIT_WAIT_MS, type Cost } from '../core/key.js';
import { AcquireTimeoutError, IdempotencyConflictError, InvalidInputError, LimiterError, UnknownChargeError } from '../errors.js';
import type { KeyLimits, Limiter, LimitsInput, PolicyLimits } from '../limiter.js';

export { AcquireTimeoutError };
export { settle, costDifference } from '../settle.js';
export type { Settles, SettleFailure, SettleOptions } from '../settle.js';
export type { Cost } from '../core/key.js';
export type { KeyLimits, LimitsInput, LimitsState, PolicyLimits } from '../limiter.js';

/** Options of PermitClient: the server, the token, and the bounds and retries of each call. */
export interface PermitClientOptions {
  /** Base URL of the permit service, e.g. `https://limits.internal.example`. */
  url: string;
  /** Bearer token (one of the server's PERMIT_TOKENS). */
  token: string;
  /** @default globalThis.fetch */
  fetch?: typeof fetch;
  /**
   * Bound on each HTTP call, in ms. The server answers at once even for a reservation (it reserves, then
   * the client sleeps), so no wait is added to it. @default 5000
   */
  timeoutMs?: number;
  /**
   * Retries of a request that got no answer. A 503 (the server's store is unavailable; nothing was
   * consumed) is retried after the server's Retry-After (at most maxRetryDelayMs). A network error or
   * timeout is retried (after 100 ms, then 200, ...) only for a request that carries an idempotency key
   * (every take, acquire and adjust does, unless `idempotency` is off): the server applies a key at most
   * once, so a request that reached it and lost its answer is answered again, not charged again. @default 2
   */
  retries?: number;
  /**
   * Send each take, acquire and adjust with an Idempotency-Key (a random UUID per call, or the call's
   * `idempotencyKey`), so its retries cannot charge twice. `false`: send none, and never retry a network
   * error or timeout. @default true
   */
  idempotency?: boolean;
  /** Longest Retry-After honoured between retries, in ms. @default 5000 */
  maxRetryDelayMs?: number;
}

/** A decision as the permit API returns it: the Decision plus the policy and key. */
export type PermitDecision = Decision & {
  policy: string;
  key: string;
  /** A refusal of a policy with several limits: the limits that refused. */
  refusedBy?: string[];
};

/** A call's idempotency: the key to send, or none. */
type Once = { idempotencyKey?: string };

/**
 * The permit call failed: the server answered with a status other than 200/429 (`status`, and `problem`
 * its RFC 9457 body; code `permit_http_<status>`), or no answer came (`status` 0; code
 * `permit_network_error` or `permit_timeout`, the underlying error as `cause`).
 */
export class PermitError extends LimiterError {
  readonly status: number;
  readonly problem: Record<string, unknown> | undefined;
  constructor(status: number, problem: Record<string, unknown> | undefined, failure?: { code: 'permit_network_error' | 'permit_timeout'; message: string; cause: unknown }) {
    super(
      failure?.code ?? `permit_http_${status}`,
      failure?.message ?? `permit API answered ${status}: ${String(problem?.detail ?? problem?.title ?? 'no detail')}`,
      failure ? { cause: failure.cause } : undefined,
    );
    this.name = 'PermitError';
    this.status = status;
    this.problem = problem;
  }
  /** The response's Retry-After header, when it had one. */
  retryAfterHeader?: string;
}

/**
 * 403: the client's token may not do this (code `permit_http_403`). `right` names the right it lacks,
 * or `policy` the policy it may not use; the message carries the server's detail. Never retried: nothing
 * was read or changed, and asking again will not change the answer.
 */
export class ForbiddenError extends PermitError {
  /** The right the token lacks (`permit`, `settle`, `admin` or `stats`), when that was the reason. */
  readonly right: string | undefined;
  /** The policy the token may not use, when that was the reason. */
  readonly policy: string | undefined;
  constructor(problem: Record<string, unknown> | undefined) {
    super(403, problem);
    this.name = 'ForbiddenError';
    this.right = typeof problem?.right === 'string' ? problem.right : undefined;
    this.policy = typeof problem?.policy === 'string' ? problem.policy : undefined;
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A policy or key as one segment of a URL path, refused (before anything is sent) where it cannot be one:
 * an empty policy, a key the server would refuse (assertKey: an empty one too), and `.` or `..`, which
 * every URL parser (fetch's too) resolves as a dot segment and drops. `/v1/limits/free/.` went out as
 * `/v1/limits/free/` and `/v1/limits/./free` as `/v1/limits/free`, the policy-wide change (review 5, H1).
 */
function segment(field: 'policy' | 'key', value: string): string {
  if (field === 'key') assertKey(value);
  else if (typeof value !== 'string' || value === '' || !value.isWellFormed()) throw new InvalidInputError(field, 'must be a non-empty string of well-formed Unicode');
  if (value === '.' || value === '..') throw new InvalidInputError(field, 'must not be "." or "..": no URL path can name them (a URL parser drops them as dot segments, so the request would reach another route)');
  return encodeURIComponent(value);
}

/** A client of the permit endpoint (fetch only: Workers, Lambda, Node, browsers): take, acquire, adjust, peek and reset, runtime limits and blocks, with idempotency keys and bounded retries. */
export class PermitClient {
  readonly #base: string;
  readonly #token: string;
  readonly #fetch: typeof fetch;
  readonly #timeoutMs: number;
  readonly #retries: number;
  readonly #maxRetryDelayMs: number;
  readonly #idempotency: boolean;

  constructor(options: PermitClientOptions) {
    if (!options?.url) throw new TypeError('[edge-limiter] PermitClient: `url` is required');
    if (!options.token) throw new TypeError('[edge-limiter] PermitClient: `token` is required');
    this.#base = options.url.replace(/\/$/, '');
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#timeoutMs = options.timeoutMs ?? 5000;
    this.#retries = options.retries ?? 2;
    this.#maxRetryDelayMs = options.maxRetryDelayMs ?? 5000;
    this.#idempotency = options.idempotency ?? true;
    if (!Number.isInteger(this.#retries) || this.#retries < 0) throw new TypeError('[edge-limiter] PermitClient: `retries` must be a non-negative integer');
  }

  /** The idempotency key a call sends: its own, else a fresh one, unless idempotency is off. */
  #keyOf(options: Once): string | undefined {
    if (options.idempotencyKey !== undefined) {
      // What the server would refuse, refused here, before anything is sent (and never retried).
      assertIdempotencyKey(options.idempotencyKey);
      return options.idempotencyKey;
    }
    return this.#idempotency ? crypto.randomUUID() : undefined;
  }

  /**
   * `once`: the request is applied at most once without an idempotency key (a settlement: by its charge).
   * `limits`: a runtime-limits route, answered with the limits (a change sets, it does not add: retried like a read).
   */
  async #call(method: string, path: string, body: unknown, signal?: AbortSignal, idempotencyKey?: string, once = false, limits = false): Promise<PermitDecision> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#once(method, path, body, signal, idempotencyKey, limits);
      } catch (err) {
        if (!(err instanceof PermitError) || attempt >= this.#retries) throw err;
        if (err.status === 0) {
          // No answer: retried only when the server can tell the retry from a new request.
          if (idempotencyKey === undefined && method !== 'GET' && !once && !limits) throw err;
          await sleep(100 * 2 ** attempt, signal);
          continue;
        }
        if (err.status !== 503) throw err;
        // Retry-After is whole seconds (RFC 9110); the problem body may say it in ms too.
        const header = Number(err.retryAfterHeader);
        const ms = Number.isFinite(header) && header >= 0 ? header * 1000 : Number(err.problem?.retryAfterMs ?? 1000);
        await sleep(Math.min(Math.max(0, ms), this.#maxRetryDelayMs), signal);
      }
    }
  }

  async #once(method: string, path: string, body: unknown, signal?: AbortSignal, idempotencyKey?: string, limits = false): Promise<PermitDecision> {
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    let res: Response;
    let text: string;
    try {
      res = await this.#fetch(`${this.#base}${path}`, {
        method,
        headers: {
          Authorization: `Bearer ${this.#token}`,
          ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
          // A Structured Field String, as draft-ietf-httpapi-idempotency-key-header writes it.
          ...(idempotencyKey === undefined ? {} : { 'Idempotency-Key': `"${idempotencyKey.replace(/["\\]/g, '\\$&')}"` }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      text = await res.text();
    } catch (err) {
      // The caller's own abort is theirs to handle, unchanged.
      if (signal?.aborted) throw signal.reason;
      if (timeout.aborted) {
        throw new PermitError(0, undefined, { code: 'permit_timeout', message: `permit API did not answer within ${this.#timeoutMs} ms`, cause: err });
      }
      throw new PermitError(0, undefined, { code: 'permit_network_error', message: `permit API unreachable: ${err instanceof Error ? err.message : String(err)}`, cause: err });
    }
    let json: Record<string, unknown> | undefined;
    try {
      json = JSON.parse(text) as Record<string, unknown>;
    } catch {
      json = undefined;
    }
    if (limits) {
      if (res.status === 200 && json && typeof json.source === 'string' && Array.isArray(json.limits)) return json as unknown as PermitDecision;
    } else if ((res.status === 200 || res.status === 429) && json && typeof json.allowed === 'boolean') return json as unknown as PermitDecision;
    // A reset's answer: no body (reset() resolves with nothing).
    if (method === 'DELETE' && res.status === 204) return undefined as unknown as PermitDecision;
    const error = res.status === 403 ? new ForbiddenError(json) : new PermitError(res.status, json);
    error.retryAfterHeader = res.headers.get('retry-after') ?? undefined;
    throw error;
  }

  /**
   * One decision. 429 is not an error: it resolves with `allowed: false`. `cost` is a number (every limit)
   * or per limit, `{ requests: 1, tokens: 1200 }`.
   */
  async take(policy: string, key: string, options: { cost?: Cost; maxWaitMs?: number; signal?: AbortSignal } & Once = {}): Promise<PermitDecision> {
    const maxWaitMs = options.maxWaitMs ?? 0;
    return this.#call('POST', '/v1/permits', { policy, key, cost: options.cost ?? 1, maxWaitMs }, options.signal, this.#keyOf(options));
  }

  /**
   * Settles a charge (POST /v1/adjustments with `charge`; the token needs the `settle` right): the take
   * or acquire sent with idempotency key `charge` (its answer's `charge`), by what the work really cost
   * (at least 0 per limit). Refunds at most what that charge took, once: the same settlement again
   * answers `repeated: true`, so a retry after a lost answer is safe (and is made, as for take). Rejects
   * with UnknownChargeError (404: no such charge on this policy and key within the server's idempotency
   * window), IdempotencyConflictError (409: settled before with another cost), InvalidInputError (a
   * cost below 0 or not an integer, before anything is sent), ForbiddenError or PermitError.
   */
  async settle(policy: string, key: string, options: { charge: string; cost: Cost; signal?: AbortSignal }): Promise<PermitDecision> {
    const { charge, cost } = options;
    assertIdempotencyKey(charge, 'charge');
    const costs = typeof cost === 'number' ? [cost] : cost && typeof cost === 'object' ? Object.values(cost) : [cost];
    if (!costs.every((c) => Number.isInteger(c) && (c as number) >= 0)) throw new InvalidInputError('cost', 'must be integers of at least 0 (the actual cost: a settlement refunds at most what its charge took)');
    try {
      return await this.#call('POST', '/v1/adjustments', { policy, key, charge, cost }, options.signal, undefined, true);
    } catch (err) {
      if (err instanceof PermitError && err.status === 404 && err.problem?.type === 'urn:edge-limiter:problem:unknown-charge') throw new UnknownChargeError(charge);
      if (err instanceof PermitError && err.status === 409) throw new IdempotencyConflictError('charge', 'was settled before with another cost; nothing was applied');
      throw err;
    }
  }

  /**
   * A free-form adjustment (POST /v1/adjustments without a charge; the token needs the `admin` right):
   * below 0 a refund (never fuller than full), above 0 a charge that may put a limit into debt, tied to
   * no charge. Resolves with the bucket as peek reads it after.
   */
  async adjust(policy: string, key: string, cost: Cost, options: { signal?: AbortSignal } & Once = {}): Promise<PermitDecision> {
    return this.#call('POST', '/v1/adjustments', { policy, key, cost }, options.signal, this.#keyOf(options));
  }

  /** The bucket's state; consumes nothing. */
  async peek(policy: string, key: string, options: { signal?: AbortSignal } = {}): Promise<PermitDecision> {
    return this.#call('GET', this.#keyPath('buckets', policy, key), undefined, options.signal);
  }

  /** Resets the bucket to full (DELETE /v1/buckets/:policy/:key). Not retried when no answer came. */
  async reset(policy: string, key: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    await this.#call('DELETE', this.#keyPath('buckets', policy, key), undefined, options.signal);
  }

  /** `/v1/{route}/{policy}/{key}`: a key's bucket, numbers or block; never the policy's (a key is checked, `undefined` too). */
  #keyPath(route: 'buckets' | 'limits' | 'blocks', policy: string, key: string): string {
    return `/v1/${route}/${segment('policy', policy)}/${segment('key', key)}`;
  }

  /** `/v1/limits/{policy}`: the policy-wide change. */
  #policyPath(policy: string): string {
    return `/v1/limits/${segment('policy', policy)}`;
  }

  async #limitsCall<T>(method: string, path: string, body: unknown, signal?: AbortSignal): Promise<T> {
    return (await this.#call(method, path, body, signal, undefined, false, true)) as unknown as T;
  }

  /**
   * Sets the key's own numbers (PUT /v1/limits/{policy}/{key}; the token needs `admin`): `limits` as the
   * policy's are written (`{ capacity, refillPerSecond }` or `refill`; several limits: `{ limits: { day: {...} } }`),
   * until expiresInMs (absent: until cleared). Every node's next decision on the key uses them. Resolves
   * with the key's limits after, and `previous`.
   */
  async setLimits(policy: string, key: string, limits: LimitsInput, options: { expiresInMs?: number; signal?: AbortSignal } = {}): Promise<KeyLimits> {
    return this.#limitsCall('PUT', this.#keyPath('limits', policy, key), { ...limits, ...(options.expiresInMs === undefined ? {} : { expiresInMs: options.expiresInMs }) }, options.signal);
  }

  /** The key's limits in force, where they come from, and its block (GET /v1/limits/{policy}/{key}). */
  async getLimits(policy: string, key: string, options: { signal?: AbortSignal } = {}): Promise<KeyLimits> {
    return this.#limitsCall('GET', this.#keyPath('limits', policy, key), undefined, options.signal);
  }

  /** Drops the key's own numbers (DELETE /v1/limits/{policy}/{key}). */
  async clearLimits(policy: string, key: string, options: { signal?: AbortSignal } = {}): Promise<KeyLimits> {
    return this.#limitsCall('DELETE', this.#keyPath('limits', policy, key), undefined, options.signal);
  }

  /** Refuses every take on the key for forMs, on every node (PUT /v1/blocks/{policy}/{key}). */
  async block(policy: string, key: string, options: { forMs: number; signal?: AbortSignal }): Promise<KeyLimits> {
    return this.#limitsCall('PUT', this.#keyPath('blocks', policy, key), { forMs: options.forMs }, options.signal);
  }

  /** Ends the key's block (DELETE /v1/blocks/{policy}/{key}). */
  async unblock(policy: string, key: string, options: { signal?: AbortSignal } = {}): Promise<KeyLimits> {
    return this.#limitsCall('DELETE', this.#keyPath('blocks', policy, key), undefined, options.signal);
  }

  /** Changes the numbers of every key of the policy that has none of its own (PUT /v1/limits/{policy}), obeyed by every node within its policyRefreshMs. */
  async setPolicyLimits(policy: string, limits: LimitsInput, options: { expiresInMs?: number; signal?: AbortSignal } = {}): Promise<PolicyLimits> {
    return this.#limitsCall('PUT', this.#policyPath(policy), { ...limits, ...(options.expiresInMs === undefined ? {} : { expiresInMs: options.expiresInMs }) }, options.signal);
  }

  /** The policy-wide change in force, if any (GET /v1/limits/{policy}). */
  async getPolicyLimits(policy: string, options: { signal?: AbortSignal } = {}): Promise<PolicyLimits> {
    return this.#limitsCall('GET', this.#policyPath(policy), undefined, options.signal);
  }

  /** Ends the policy-wide change (DELETE /v1/limits/{policy}). */
  async clearPolicyLimits(policy: string, options: { signal?: AbortSignal } = {}): Promise<PolicyLimits> {
    return this.#limitsCall('DELETE', this.#policyPath(policy), undefined, options.signal);
  }

  /**
   * Reserves a permit in one request (maxWaitMs = timeoutMs), then sleeps until it is due: no polling.
   * Rejects with AcquireTimeoutError, consuming nothing, when no permit can be had within timeoutMs.
   */
  async acquire(policy: string, key: string, options: { cost?: Cost; timeoutMs?: number; signal?: AbortSignal } & Once = {}): Promise<PermitDecision> {
    const timeoutMs = Math.min(options.timeoutMs ?? 30_000, MAX_PERMIT_WAIT_MS);
    const d = await this.take(policy, key, { cost: options.cost, maxWaitMs: timeoutMs, signal: options.signal, ...(options.idempotencyKey === undefined ? {} : { idempotencyKey: options.idempotencyKey }) });
    if (!d.allowed) throw new AcquireTimeoutError(`no permit within ${timeoutMs} ms; tokens exist in ${d.retryAfterMs} ms`, d.retryAfterMs);
    if (d.waitMs > 0) await sleep(d.waitMs, options.signal);
    return d;
  }
}

/** Options of limitedFetch: where permits come from (a limiter or a PermitClient), and the policy, key, cost and longest wait of each call. */
export interface LimitedFetchOptions {
  /** Decide in-process against a store... */
  limiter?: Limiter;
  /** ...or through the permit endpoint. Give exactly one. */
  client?: PermitClient;
  policy: string;
  /** The bucket, e.g. the upstream API's account. A function gets the request's URL. */
  key: string | ((url: string) => string);
  /** Tokens per call (a number, or per limit). @default 1 */
  cost?: Cost;
  /** Longest wait for a permit per call, in ms. @default 30000 */
  timeoutMs?: number;
}

/**
 * Wraps `fetch` so each call first acquires a permit (reserve, then sleep): many workers sharing one
 * remote bucket stay under an upstream API's limit. Rejects with AcquireTimeoutError when no permit
 * comes within timeoutMs; the upstream is then not called.
 */
export function limitedFetch(fetchImpl: typeof fetch, options: LimitedFetchOptions): typeof fetch {
  if (!options.limiter === !options.client) throw new TypeError('[edge-limiter] limitedFetch: give exactly one of `limiter` or `client`');
  const wrapped = async (input: RequestInfo | URL, init?: RequestInit) => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const key = typeof options.key === 'function' ? options.key(url) : options.key;
    const opts = { cost: options.cost ?? 1, timeoutMs: options.timeoutMs ?? 30_000, signal: init?.signal ?? undefined };
    if (options.limiter) await options.limiter.acquire(options.policy, key, opts);
    else await options.client!.acquire(options.policy, key, opts);
    return fetchImpl(input, init);
  };
  return wrapped as typeof fetch;
}
