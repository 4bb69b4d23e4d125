// The permit API's routes for runtime limits: a key's own numbers (PUT/GET/DELETE /v1/limits/{policy}/{key}),
// a policy-wide change (PUT/GET/DELETE /v1/limits/{policy}) and blocks (PUT/DELETE /v1/blocks/{policy}/{key}).
// Each change is one limiter call (one store call) with the caller's token name as its actor, so the
// limiter's onAudit hears it (the deployed app writes the audit log line and counts it there); its answer
// is the key's (or policy's) limits after, and `previous`. Bad input is a 400 problem naming the field;
// nothing reaches the store.
import type { Context, Hono, MiddlewareHandler } from 'hono';
import { assertKey } from '../core/key.js';
import { InvalidInputError, StoreError } from '../errors.js';
import type { KeyLimits, Limiter, PolicyLimits } from '../limiter.js';
import { readJsonBody } from './body.js';
import { problemResponse } from './problem.js';

/** The fields a PUT of limits may carry: the limits as a policy writes them, and when they end. */
export const LIMITS_FIELDS: ReadonlySet<string> = new Set(['capacity', 'refillPerSecond', 'refill', 'limits', 'expiresInMs']);
/** The fields a PUT of a block may carry. */
export const BLOCK_FIELDS: ReadonlySet<string> = new Set(['forMs']);

/** `/v1/limits/{policy}/{key}`: the key is any characters, line terminators included (as /v1/buckets). */
export const KEY_LIMITS = '/v1/limits/:policy/:key{[\\s\\S]+}';
export const POLICY_LIMITS = '/v1/limits/:policy';
export const BLOCK = '/v1/blocks/:policy/:key{[\\s\\S]+}';

export interface LimitsRoutesOptions {
  limiter: Limiter;
  /** The name of the caller's token (never its secret), for the log line and onAudit. */
  actorOf: (c: Context) => string | undefined;
  /** The middleware that checks the caller's right to a route (./auth.ts ROUTE_RIGHTS). */
  guard: (route: LimitsRoute) => MiddlewareHandler;
  /** The 403 when the caller's token may not use the policy (checked before the policy is looked up). */
  scope: (c: Context, policy: string) => Response | undefined;
}

/** The routes this module adds, as ./auth.ts's table names them. */
export type LimitsRoute = `${'GET' | 'PUT' | 'DELETE'} /v1/limits/{policy}/{key}` | `${'GET' | 'PUT' | 'DELETE'} /v1/limits/{policy}` | `${'PUT' | 'DELETE'} /v1/blocks/{policy}/{key}`;

const detail = (err: Error) => err.message.replace('[edge-limiter] ', '');

/**
 * A limiter error as the API's answer: 400 for bad input; 501 or 507 when the store refused a change it
 * will refuse again (no Retry-After: a retry cannot help); 503 when the store did not answer.
 */
function refused(err: unknown): Response {
  if (err instanceof InvalidInputError) return problemResponse('invalid-request', detail(err), { field: err.field });
  if (err instanceof StoreError && err.permanent) return problemResponse(err.permanent === 'full' ? 'overrides-full' : 'runtime-limits-unsupported', detail(err));
  if (err instanceof StoreError) return problemResponse('store-unavailable', 'the rate-limit store is unavailable: nothing was changed, or the change may not have been applied', {}, { 'Retry-After': '1' });
  throw err;
}

/** The body of a PUT as an object whose fields are all in `fields`, or the 400 that names the first one that is not. */
function fieldsOf(value: unknown, fields: ReadonlySet<string>): { body: Record<string, unknown> } | { response: Response } {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { response: problemResponse('invalid-request', 'the body must be a JSON object', { field: '' }) };
  const b = value as Record<string, unknown>;
  for (const f of Object.keys(b)) if (!fields.has(f)) return { response: problemResponse('invalid-request', `unknown field \`${f.slice(0, 64)}\``, { field: f.slice(0, 64) }) };
  return { body: b };
}

/** Adds the runtime-limits routes to `app` (after its bearer check on /v1/*). */
export function addLimitsRoutes(app: Hono, options: LimitsRoutesOptions): void {
  const { limiter, actorOf, guard, scope } = options;

  /** The policy and key of the path: 404 for a policy not configured, 400 for a key the limiter refuses. */
  const target = (c: Context, withKey: boolean): { policy: string; key: string } | { response: Response } => {
    const name = c.req.param('policy') ?? '';
    const outside = scope(c, name);
    if (outside) return { response: outside };
    if (!limiter.policy(name)) return { response: problemResponse('unknown-policy', `no policy named ${JSON.stringify(name.slice(0, 64))}`, { field: 'policy' }) };
    if (!withKey) return { policy: name, key: '*' };
    const key = c.req.param('key') ?? '';
    try {
      assertKey(key);
    } catch (err) {
      return { response: problemResponse('invalid-request', detail(err as Error), { field: 'key' }) };
    }
    return { policy: name, key };
  };

  /** Runs one change as the caller (its token's name is the change's actor) and answers what it returns. */
  const change = async (c: Context, run: (actor: { actor?: string }) => Promise<KeyLimits | PolicyLimits>): Promise<Response> => {
    const name = actorOf(c);
    try {
      return Response.json(await run(name === undefined ? {} : { actor: name }));
    } catch (err) {
      return refused(err);
    }
  };

  const read = async (run: () => Promise<unknown>): Promise<Response> => {
    try {
      return Response.json(await run());
    } catch (err) {
      return refused(err);
    }
  };

  const limitsBody = async (c: Context) => {
    const body = await readJsonBody(c.req.raw);
    if (!body.ok) return { response: body.response };
    const parsed = fieldsOf(body.value, LIMITS_FIELDS);
    if ('response' in parsed) return parsed;
    const { expiresInMs, ...limits } = parsed.body;
    return { limits, expiresInMs };
  };

  app.get(KEY_LIMITS, guard('GET /v1/limits/{policy}/{key}'), async (c) => {
    const t = target(c, true);
    if ('response' in t) return t.response;
    return read(() => limiter.getLimits(t.policy, t.key));
  });
  app.put(KEY_LIMITS, guard('PUT /v1/limits/{policy}/{key}'), async (c) => {
    const t = target(c, true);
    if ('response' in t) return t.response;
    const b = await limitsBody(c);
    if ('response' in b) return b.response!;
    return change(c, (actor) => limiter.setLimits(t.policy, t.key, b.limits as never, { ...actor, ...(b.expiresInMs === undefined ? {} : { expiresInMs: b.expiresInMs as number }) }));
  });
  app.delete(KEY_LIMITS, guard('DELETE /v1/limits/{policy}/{key}'), async (c) => {
    const t = target(c, true);
    if ('response' in t) return t.response;
    return change(c, (actor) => limiter.clearLimits(t.policy, t.key, actor));
  });
  app.all(KEY_LIMITS, () => problemResponse('method-not-allowed', 'use GET, PUT or DELETE', {}, { Allow: 'GET, PUT, DELETE' }));

  app.get(POLICY_LIMITS, guard('GET /v1/limits/{policy}'), async (c) => {
    const t = target(c, false);
    if ('response' in t) return t.response;
    return read(() => limiter.getPolicyLimits(t.policy));
  });
  app.put(POLICY_LIMITS, guard('PUT /v1/limits/{policy}'), async (c) => {
    const t = target(c, false);
    if ('response' in t) return t.response;
    const b = await limitsBody(c);
    if ('response' in b) return b.response!;
    return change(c, (actor) => limiter.setPolicyLimits(t.policy, b.limits as never, { ...actor, ...(b.expiresInMs === undefined ? {} : { expiresInMs: b.expiresInMs as number }) }));
  });
  app.delete(POLICY_LIMITS, guard('DELETE /v1/limits/{policy}'), async (c) => {
    const t = target(c, false);
    if ('response' in t) return t.response;
    return change(c, (actor) => limiter.clearPolicyLimits(t.policy, actor));
  });
  app.all(POLICY_LIMITS, () => problemResponse('method-not-allowed', 'use GET, PUT or DELETE', {}, { Allow: 'GET, PUT, DELETE' }));

  app.put(BLOCK, guard('PUT /v1/blocks/{policy}/{key}'), async (c) => {
    const t = target(c, true);
    if ('response' in t) return t.response;
    const body = await readJsonBody(c.req.raw);
    if (!body.ok) return body.response;
    const parsed = fieldsOf(body.value, BLOCK_FIELDS);
    if ('response' in parsed) return parsed.response;
    if (parsed.body.forMs === undefined) return problemResponse('invalid-request', '`forMs` is required: how long the key is refused, in ms', { field: 'forMs' });
    return change(c, (actor) => limiter.block(t.policy, t.key, { ...actor, forMs: parsed.body.forMs as number }));
  });
  app.delete(BLOCK, guard('DELETE /v1/blocks/{policy}/{key}'), async (c) => {
    const t = target(c, true);
    if ('response' in t) return t.response;
    return change(c, (actor) => limiter.unblock(t.policy, t.key, actor));
  });
  app.all(BLOCK, () => problemResponse('method-not-allowed', 'use PUT or DELETE', {}, { Allow: 'PUT, DELETE' }));
}
