// The HTTP permit endpoint: other services POST for a permit and get 200 or 429. Also bucket
// inspection/reset, runtime limits and blocks, and /healthz. Every refusal is problem+json; bad input never reaches the store.
import { Hono, type Context } from 'hono';
import type { Decision } from '../core/decision.js';
import { assertIdempotencyKey, assertKey, MAX_PERMIT_WAIT_MS, resolveAdjustment, resolveCost, resolveSettlement, type Cost } from '../core/key.js';
import { IdempotencyConflictError, InvalidInputError, StoreError, UnknownChargeError } from '../errors.js';
import type { ResolvedPolicy } from '../core/policy.js';
import type { Limiter } from '../limiter.js';
import { checkTokens, guard, missingPolicy, missingRight, setGrant, grantOf, tokenChecker, type PermitToken } from './auth.js';
import { readJsonBody } from './body.js';
import { cachedPing } from './health-ping.js';
import { addLimitsRoutes } from './limits-routes.js';
import { rateLimitHeaders, refusingLimits } from './headers.js';
import { openApiJson } from './openapi.js';
import { problemResponse } from './problem.js';
import { decisionWaitUntil } from './wait-until.js';

export { MAX_PERMIT_WAIT_MS };
const HEALTH_TIMEOUT_MS = 1000;
/** How long one store ping answers /healthz: each ping is a billed command on Upstash. */
export const HEALTH_CACHE_MS = 1000;

/** Options of permitApp: the limiter, the bearer tokens it accepts, the log sink and the health check's clock. */
export interface PermitAppOptions {
  limiter: Limiter;
  /**
   * Accepted bearer tokens: scoped ones (a name, the secret or its `sha256:`, policies, rights), or plain
   * strings, each with every right on every policy. With none, every /v1 request gets 401 (and the log
   * says why, once). Invalid ones throw a ConfigError here.
   */
  tokens: readonly (string | PermitToken)[];
  /** What configuration errors in `tokens` are named after, as `<tokensField>[i].secret`. @default 'tokens' */
  tokensField?: string;
  /**
   * Structured log sink. Never receives secrets: tokens are named. Administrative actions (reset,
   * free-form adjust) go to the limiter's onAudit, with the token's name as their actor. @default console
   */
  log?: (level: 'info' | 'warn' | 'error', line: Record<string, unknown>) => void;
  /** The OpenAPI document served at GET /v1/openapi.json (absent: no such route). @default permitApp: this API's (src/http/openapi.ts) */
  openApiJson?: string;
  /** Monotonic clock for the /healthz ping cache, in ms. @default performance.now */
  monotonicMs?: () => number;
}

/** The JSON body of a 200 or 429 from the permit API. */
export type PermitBody = Decision & {
  policy: string;
  key: string;
  /** A refusal of a policy with several limits: the limits that refused. */
  refusedBy?: string[];
  /** The request's Idempotency-Key was applied before: this is the first answer, and nothing was charged again. */
  repeated?: boolean;
  /** A take sent with an Idempotency-Key: that key, which names this charge for a settlement. */
  charge?: string;
};

/** The fields a permit request and an adjustment may carry (test/http/openapi.test.ts holds the document to them). */
export const FIELDS: ReadonlySet<string> = new Set(['policy', 'key', 'cost', 'maxWaitMs']);
export const ADJUST_FIELDS: ReadonlySet<string> = new Set(['policy', 'key', 'cost']);
/** A settlement: an adjustment that names the charge it settles, with the actual cost. */
export const SETTLE_FIELDS: ReadonlySet<string> = new Set(['policy', 'key', 'charge', 'cost']);

type Parsed = { ok: true; policy: ResolvedPolicy; key: string; cost: Cost; maxWaitMs: number; charge?: string } | { ok: false; response: Response };

function invalid(detail: string, field: string): { ok: false; response: Response } {
  return { ok: false, response: problemResponse('invalid-request', detail, { field }) };
}

function isInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v);
}

/** The key rules are the limiter's own (core/key.ts); this only turns a violation into a detail string. */
function checkKey(key: unknown): string | undefined {
  try {
    assertKey(key);
    return undefined;
  } catch (err) {
    return (err as Error).message.replace('[edge-limiter] ', '');
  }
}

/**
 * The route pattern of a bucket's key: any characters, line terminators included (`.` would not match
 * `\n`, `\r`, U+2028 or U+2029, and such keys could be charged but not read or reset).
 */
const BUCKET = '/v1/buckets/:policy/:key{[\\s\\S]+}';

/**
 * `.` and `..` are the keys no URL path can name: every client and runtime resolves them (and `%2e`,
 * `%2e%2e`) as dot segments before a route sees them. So that every key the API charges can also be
 * read and reset, POST refuses them.
 */
const UNADDRESSABLE = new Set(['.', '..']);

/** A cost the limiter would refuse (core/key.ts), as the 400 that names its field. */
function checkCost(check: () => unknown): { ok: false; response: Response } | undefined {
  try {
    check();
    return undefined;
  } catch (err) {
    if (err instanceof InvalidInputError) return invalid(err.message.replace('[edge-limiter] ', ''), err.field);
    throw err;
  }
}

/**
 * The Idempotency-Key request header (draft-ietf-httpapi-idempotency-key-header): a Structured Field
 * String (`"8e03978e-40d5-43e8-bc93-6894a57f9324"`), or the same text unquoted. Undefined when absent;
 * a 400 naming the header when it is not 1 to 256 bytes.
 */
function idempotencyKeyOf(header: string | undefined): { key?: string; response?: Response } {
  if (header === undefined) return {};
  let key = header.trim();
  if (key.length >= 2 && key.startsWith('"') && key.endsWith('"')) key = key.slice(1, -1).replace(/\\(["\\])/g, '$1');
  try {
    assertIdempotencyKey(key, 'Idempotency-Key');
    return { key };
  } catch (err) {
    return { response: invalid((err as Error).message.replace('[edge-limiter] ', ''), 'Idempotency-Key').response };
  }
}

/** A take or adjustment the limiter refused as input, as its problem: a reused idempotency key is a 422. */
function refusedInput(err: unknown): Response {
  if (err instanceof IdempotencyConflictError) {
    return problemResponse('idempotency-key-reused', 'this Idempotency-Key was used before for another request (another cost, wait or route); nothing was applied', { field: 'Idempotency-Key' });
  }
  if (err instanceof InvalidInputError) return invalid(err.message.replace('[edge-limiter] ', ''), err.field).response;
  throw err;
}

/** `scope`: the token's refusal of a policy, asked before the policy is looked up. */
function parsePermit(body: unknown, limiter: Limiter, scope: (policy: string) => Response | undefined, fields = FIELDS): Parsed {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return invalid('the body must be a JSON object', '');
  const b = body as Record<string, unknown>;
  // The token's scope first: a policy it may not use gets 403 whatever else the body holds.
  const outside = typeof b.policy === 'string' ? scope(b.policy) : undefined;
  if (outside) return { ok: false, response: outside };
  for (const f of Object.keys(b)) if (!fields.has(f)) return invalid(`unknown field \`${f.slice(0, 64)}\``, f.slice(0, 64));
  if (typeof b.policy !== 'string' || b.policy.length === 0) return invalid('`policy` is required and must be a string', 'policy');
  const policy = limiter.policy(b.policy);
  if (!policy) return { ok: false, response: problemResponse('unknown-policy', `no policy named ${JSON.stringify(b.policy.slice(0, 64))}`, { field: 'policy' }) };
  const keyProblem = checkKey(b.key);
  if (keyProblem) return invalid(keyProblem, 'key');
  if (UNADDRESSABLE.has(b.key as string)) return invalid('`key` must not be "." or "..": no URL path can name them, so /v1/buckets could not read or reset the bucket', 'key');
  // null is no cost: only an absent one defaults (to 1, for a take).
  const cost = (b.cost === undefined ? 1 : b.cost) as Cost;
  if (fields === SETTLE_FIELDS) {
    if (b.cost === undefined) return invalid('`cost` is required: what the work really cost, at least 0', 'cost');
    const bad = checkCost(() => (assertIdempotencyKey(b.charge, 'charge'), resolveSettlement(policy, cost)));
    return bad ?? { ok: true, policy, key: b.key as string, cost, maxWaitMs: 0, charge: b.charge as string };
  }
  if (fields === ADJUST_FIELDS) {
    if (b.cost === undefined) return invalid('`cost` is required: below 0 a refund, above 0 a charge', 'cost');
    const bad = checkCost(() => resolveAdjustment(policy, cost));
    return bad ?? { ok: true, policy, key: b.key as string, cost, maxWaitMs: 0 };
  }
  const bad = checkCost(() => resolveCost(policy, cost));
  if (bad) return bad;
  // As with cost, null is not absent: only an absent maxWaitMs defaults (to 0, a plain take).
  const maxWaitMs = b.maxWaitMs === undefined ? 0 : b.maxWaitMs;
  if (!isInt(maxWaitMs) || maxWaitMs < 0 || maxWaitMs > MAX_PERMIT_WAIT_MS) return invalid(`\`maxWaitMs\` must be an integer from 0 to ${MAX_PERMIT_WAIT_MS}`, 'maxWaitMs');
  return { ok: true, policy, key: b.key as string, cost, maxWaitMs };
}

/**
 * 200 or 429 with the decision as JSON; 503 problem+json when the store failed and the policy fails
 * closed. `inspect` (GET of a bucket) answers 200 either way: that request itself was not limited.
 */
function decisionResponse(policy: ResolvedPolicy, key: string, decision: Decision, inspect = false): Response {
  const headers = rateLimitHeaders(policy, decision);
  if (!decision.allowed && decision.reason === 'store_error') {
    return problemResponse('store-unavailable', 'the rate-limit store is unavailable and this policy fails closed', { policy: policy.name, retryAfterMs: decision.retryAfterMs }, headers);
  }
  // Field order is the documented one; numbers the store did not give (store_error) are left out.
  const body: Record<string, unknown> = {
    allowed: decision.allowed,
    policy: policy.name,
    key,
    limit: decision.limit,
    remaining: decision.remaining,
    retryAfterMs: decision.retryAfterMs,
    resetAfterMs: decision.resetAfterMs,
    waitMs: decision.waitMs,
  };
  if (decision.reason) body.reason = decision.reason;
  if (decision.reason !== 'store_error' && decision.repeated) body.repeated = true;
  if (decision.reason !== 'store_error' && decision.charge !== undefined) body.charge = decision.charge;
  if (decision.reason !== 'store_error' && decision.limits) body.limits = decision.limits;
  if (decision.reason !== 'store_error' && decision.limitsInForce) body.limitsInForce = decision.limitsInForce;
  const refusedBy = inspect ? undefined : refusingLimits(decision);
  if (refusedBy) body.refusedBy = refusedBy;
  return new Response(JSON.stringify(body), {
    status: decision.allowed || inspect ? 200 : 429,
    headers: { 'Content-Type': 'application/json', ...headers },
  });
}

/** Builds the permit API as a Hono app; mount it or serve it as is. */
export function permitApp(options: PermitAppOptions): Hono {
  return addPermitRoutes(new Hono(), { openApiJson, ...options });
}

/**
 * The permit API's routes, refusals and error handler, added to `app`. permitApp gives it Hono's default
 * router; the deployables (functions/app) give it a smaller one, as strict (see routerApp there).
 */
export function addPermitRoutes(app: Hono, options: PermitAppOptions): Hono {
  const { limiter } = options;
  const log = options.log ?? ((level, line) => console[level](JSON.stringify(line)));
  const field = options.tokensField ?? 'tokens';
  const auth = tokenChecker(checkTokens(options.tokens.filter((t) => t !== ''), field, [...limiter.policies.keys()]), field);
  let warnedNoTokens = false;

  // /healthz: the store's ping (one shared ping in flight, remembered for HEALTH_CACHE_MS from its
  // answer, so probes cost at most one store command a second) and whether decisions can reach the
  // store at all (the in-flight cap).
  const storeAnswers = cachedPing(() => limiter.store.ping(), {
    monotonicMs: options.monotonicMs ?? (() => performance.now()),
    cacheMs: HEALTH_CACHE_MS,
    timeoutMs: HEALTH_TIMEOUT_MS,
  });
  app.get('/healthz', async () => {
    const pinged = await storeAnswers();
    const stats = limiter.stats();
    const ok = pinged && stats.pendingStoreCalls < stats.maxPendingStoreCalls;
    return Response.json({ ok, store: limiter.store.name, ...stats }, { status: ok ? 200 : 503 });
  });
  app.all('/healthz', () => problemResponse('method-not-allowed', 'use GET', {}, { Allow: 'GET' }));

  // The API's description (src/http/openapi.ts): public, before the bearer check, and names no policy.
  // The Worker serves it as a static asset instead (wrangler.toml [assets]), so its bundle holds no builder.
  const doc = options.openApiJson;
  if (doc !== undefined) {
    app.get('/v1/openapi.json', () => new Response(doc, { headers: { 'Content-Type': 'application/json', 'Cache-Control': 'public, max-age=300' } }));
    app.all('/v1/openapi.json', () => problemResponse('method-not-allowed', 'use GET', {}, { Allow: 'GET' }));
  }

  app.use('/v1/*', async (c, next) => {
    if (!auth.configured) {
      if (!warnedNoTokens) {
        warnedNoTokens = true;
        log('warn', { msg: 'permit API refuses every request: no PERMIT_TOKENS are configured' });
      }
      return problemResponse('unauthorized', 'no bearer tokens are configured on this server (PERMIT_TOKENS)', {}, { 'WWW-Authenticate': 'Bearer' });
    }
    // A plain secret equal to another token's hashed one shows only once plain ones are hashed: every
    // request then answers a bare 500 (the caller may not be authenticated), and the log names the token.
    const grant = await auth.check(c.req.header('authorization')).catch((err: Error) => err);
    if (grant instanceof Error) {
      log('error', { msg: 'invalid configuration', error: grant.message });
      return problemResponse('server-misconfigured', 'the bearer tokens are misconfigured: the server log says how');
    }
    if (!grant) return problemResponse('unauthorized', 'send Authorization: Bearer <token> with a configured token', {}, { 'WWW-Authenticate': 'Bearer' });
    setGrant(c, grant);
    await next();
    // A refusal by scope may be a leaked token trying its luck: say which one.
    if (c.res.status === 403) log('warn', { msg: 'forbidden', token: grant.name, method: c.req.method, path: c.req.path.slice(0, 128) });
  });

  app.post('/v1/permits', guard('POST /v1/permits'), async (c) => {
    const id = idempotencyKeyOf(c.req.header('idempotency-key'));
    if (id.response) return id.response;
    const body = await readJsonBody(c.req.raw);
    if (!body.ok) return body.response;
    const p = parsePermit(body.value, limiter, (policy) => missingPolicy(c, policy));
    if (!p.ok) return p.response;
    let decision: Decision;
    try {
      decision = await limiter.take(p.policy.name, p.key, {
        cost: p.cost,
        maxWaitMs: p.maxWaitMs,
        waitUntil: decisionWaitUntil(c, p.policy.lease !== undefined),
        ...(id.key === undefined ? {} : { idempotencyKey: id.key }),
      });
    } catch (err) {
      return refusedInput(err);
    }
    return decisionResponse(p.policy, p.key, decision);
  });

  // A cost after the fact, in one store call: a settlement of a charge the body names (`settle`: a take's
  // Idempotency-Key, by the actual cost; a refund of at most what it took, once), or free-form, refunded
  // (below 0) or charged (above 0) by any amount (`admin`). The right it needs depends on the body's
  // form, so it is checked once the body is read.
  app.post('/v1/adjustments', async (c) => {
    const id = idempotencyKeyOf(c.req.header('idempotency-key'));
    if (id.response) return id.response;
    const body = await readJsonBody(c.req.raw);
    if (!body.ok) return body.response;
    // Only a charge named as a string makes a settlement (settle); any other body is free-form (admin), so
    // no `charge` the parser might read as absent (null, a number) lets a settle token past its bound.
    const charged = typeof (body.value as { charge?: unknown } | null)?.charge === 'string';
    const outside = missingRight(c, charged ? 'POST /v1/adjustments with a charge' : 'POST /v1/adjustments');
    if (outside) return outside;
    const p = parsePermit(body.value, limiter, (policy) => missingPolicy(c, policy), charged ? SETTLE_FIELDS : ADJUST_FIELDS);
    if (!p.ok) return p.response;
    let decision: Decision;
    if (p.charge !== undefined) {
      // The charge is the settlement's own idempotency key: an Idempotency-Key header adds nothing.
      try {
        decision = await limiter.settle(p.policy.name, p.key, { charge: p.charge, cost: p.cost });
      } catch (err) {
        if (err instanceof UnknownChargeError) {
          return problemResponse('unknown-charge', 'no take with this charge (its Idempotency-Key) on this policy and key within the idempotency window; nothing was applied', { field: 'charge' });
        }
        if (err instanceof IdempotencyConflictError) return problemResponse('charge-settled', 'this charge was settled before with another cost; nothing was applied', { field: 'charge' });
        if (!(err instanceof StoreError)) return refusedInput(err);
        return problemResponse('store-unavailable', 'the rate-limit store is unavailable: the settlement may not have been applied (settling again with the same cost is safe)', { policy: p.policy.name }, { 'Retry-After': '1' });
      }
      return decisionResponse(p.policy, p.key, decision, true);
    }
    try {
      // The token's name goes to the limiter's onAudit as the actor of this administrative action.
      decision = await limiter.adjust(p.policy.name, p.key, p.cost, { actor: grantOf(c)!.name, ...(id.key === undefined ? {} : { idempotencyKey: id.key }) });
    } catch (err) {
      if (!(err instanceof StoreError)) return refusedInput(err);
      return problemResponse('store-unavailable', 'the rate-limit store is unavailable: the adjustment was not applied', { policy: p.policy.name }, { 'Retry-After': '1' });
    }
    // The bucket as it is after the adjustment (allowed: a take of 1 would pass now): a 200 either way.
    return decisionResponse(p.policy, p.key, decision, true);
  });

  const bucket = (c: Context) => {
    const outside = missingPolicy(c, c.req.param('policy') ?? '');
    if (outside) return { response: outside };
    const policy = limiter.policy(c.req.param('policy') ?? '');
    if (!policy) return { response: problemResponse('unknown-policy', `no policy named ${JSON.stringify((c.req.param('policy') ?? '').slice(0, 64))}`, { field: 'policy' }) };
    const key = c.req.param('key') ?? '';
    const keyProblem = checkKey(key);
    if (keyProblem) return { response: problemResponse('invalid-request', keyProblem, { field: 'key' }) };
    return { policy, key };
  };

  app.get(BUCKET, guard('GET /v1/buckets/{policy}/{key}'), async (c) => {
    const b = bucket(c);
    if (b.response) return b.response;
    const decision = await limiter.peek(b.policy.name, b.key);
    return decisionResponse(b.policy, b.key, decision, true);
  });

  app.delete(BUCKET, guard('DELETE /v1/buckets/{policy}/{key}'), async (c) => {
    const b = bucket(c);
    if (b.response) return b.response;
    try {
      await limiter.reset(b.policy.name, b.key, { actor: grantOf(c)!.name });
    } catch {
      return problemResponse('store-unavailable', 'the rate-limit store is unavailable', {}, { 'Retry-After': '1' });
    }
    return c.body(null, 204);
  });

  // Runtime limits and blocks (./limits-routes.ts): the admin right, the token's policies, and its name as
  // the actor of each change (the limiter's onAudit).
  addLimitsRoutes(app, { limiter, actorOf: (c) => grantOf(c)?.name, guard: (route) => guard(route), scope: missingPolicy });

  app.all('/v1/permits', () => problemResponse('method-not-allowed', 'use POST', {}, { Allow: 'POST' }));
  app.all('/v1/adjustments', () => problemResponse('method-not-allowed', 'use POST', {}, { Allow: 'POST' }));
  app.all(BUCKET, () => problemResponse('method-not-allowed', 'use GET or DELETE', {}, { Allow: 'GET, DELETE' }));
  app.notFound(() => problemResponse('not-found', 'no such route'));
  app.onError((err) => {
    log('error', { msg: 'unhandled error', error: err instanceof Error ? err.message : String(err) });
    return problemResponse('internal-error', 'an unexpected error occurred');
  });
  return app;
}
