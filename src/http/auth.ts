// Who may do what on the permit API: scoped bearer tokens (a name, a secret, the policies and rights it
// has), the one table of the right each route needs, and the checks. Secrets are compared as SHA-256
// digests against every configured one with no early exit, so neither which token matched, nor whether
// one did, nor the presented token's length shows in the timing. Secrets are never logged: names are.
import type { Context, MiddlewareHandler } from 'hono';
import { ConfigError } from '../errors.js';
import { problemResponse } from './problem.js';

/**
 * `permit`: take, reserve and read a bucket. `settle`: settle a charge it names. `admin`: reset a bucket
 * and adjust by any amount. `stats`: read the decision counts and most refused keys (they hold keys).
 */
export type Right = 'permit' | 'settle' | 'admin' | 'stats';
/** Every right, in the order the docs list them. */
export const RIGHTS: readonly Right[] = ['permit', 'settle', 'admin', 'stats'];

/**
 * The right each route needs: the one place that says so. permitApp checks it and the OpenAPI document
 * states it (`x-required-right`). `POST /v1/adjustments` needs `settle` when its body names a `charge`,
 * `admin` otherwise. A new route adds its line here and `guard('<its line>')` where it is registered.
 */
export const ROUTE_RIGHTS = {
  'POST /v1/permits': 'permit',
  'GET /v1/buckets/{policy}/{key}': 'permit',
  'DELETE /v1/buckets/{policy}/{key}': 'admin',
  'POST /v1/adjustments': 'admin',
  'POST /v1/adjustments with a charge': 'settle',
  'GET /v1/stats': 'stats',
  'GET /v1/limits/{policy}/{key}': 'admin',
  'PUT /v1/limits/{policy}/{key}': 'admin',
  'DELETE /v1/limits/{policy}/{key}': 'admin',
  'GET /v1/limits/{policy}': 'admin',
  'PUT /v1/limits/{policy}': 'admin',
  'DELETE /v1/limits/{policy}': 'admin',
  'PUT /v1/blocks/{policy}/{key}': 'admin',
  'DELETE /v1/blocks/{policy}/{key}': 'admin',
} as const satisfies Record<string, Right>;
export type Route = keyof typeof ROUTE_RIGHTS;

/**
 * A bearer token of the permit API. A plain string in `tokens` is a token with every right on every
 * policy, named `token-<position from 1>`.
 */
export interface PermitToken {
  /** Appears in logs, audit lines and 403 details; the secret never does. Letters, digits, `.`, `_`, `-`, at most 64. */
  name: string;
  /** The token as sent (in PERMIT_TOKENS' JSON form at least 16 characters, checked at start), or its SHA-256 as `sha256:<64 hex digits>`, so a configuration dump holds no usable token. */
  secret: string;
  /** The policies it may name, or `'*'` for all. */
  policies: readonly string[] | '*';
  /** What it may do (at least one). */
  rights: readonly Right[];
}

/** A checked token: what a request that presented it may do. */
export interface Grant {
  readonly name: string;
  readonly policies: ReadonlySet<string> | '*';
  readonly rights: ReadonlySet<Right>;
}

const encoder = new TextEncoder();

async function digest(s: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(s)));
}

/** 1 when the two 32-byte digests are equal, else 0, after the same work either way. */
function same32(a: Uint8Array, b: Uint8Array): number {
  let diff = 0;
  for (let i = 0; i < 32; i++) diff |= a[i]! ^ b[i]!;
  return ((diff - 1) >>> 8) & 1;
}

/** The fewest characters of a scoped token's plain secret in PERMIT_TOKENS' JSON form. */
export const MIN_SECRET = 16;
const NAME = /^[A-Za-z0-9._-]{1,64}$/;
const HASHED = /^sha256:[0-9a-f]{64}$/;

/** A token as checked: its grant and its secret as configured (plain, or `sha256:<hex>`). */
export interface CheckedToken {
  grant: Grant;
  secret: string;
}

/**
 * The tokens as grants, checked when the app is made. A token that is not valid, or a name or secret used
 * twice, is a ConfigError naming `<field>[i].<part>`; no message holds a secret. `policies`: the
 * configured policy names, when known, so that a misspelt one is refused too. `minSecret`: the fewest
 * characters a plain secret of a scoped token may have (0: any).
 */
export function checkTokens(tokens: readonly (string | PermitToken)[], field = 'tokens', policies?: readonly string[], minSecret = 0): CheckedToken[] {
  const names = new Set<string>();
  const secrets = new Set<string>();
  return tokens.map((t, i) => {
    const at = `${field}[${i}]`;
    const token = typeof t === 'string' ? { name: `token-${i + 1}`, secret: t, policies: '*' as const, rights: RIGHTS } : t;
    if (typeof token !== 'object' || token === null || Array.isArray(token)) throw new ConfigError(at, 'must be an object with name, secret, policies and rights');
    // No message echoes what was configured (a field's name or a value may be a misplaced secret): positions only.
    const unknown = Object.keys(token).findIndex((k) => !['name', 'secret', 'policies', 'rights'].includes(k));
    if (unknown >= 0) throw new ConfigError(at, `has an unknown field (its field ${unknown + 1}): a token has only name, secret, policies and rights`);
    const { name, secret, policies: scope, rights } = token;
    if (typeof name !== 'string' || !NAME.test(name)) throw new ConfigError(`${at}.name`, 'must be 1 to 64 letters, digits, ".", "_" or "-"');
    if (names.has(name)) throw new ConfigError(`${at}.name`, `is the name of ${field}[${[...names].indexOf(name)}]`);
    names.add(name);
    if (typeof secret !== 'string' || secret === '' || /\s/.test(secret) || (secret.startsWith('sha256:') && !HASHED.test(secret))) {
      throw new ConfigError(`${at}.secret`, 'must be the token (no whitespace) or "sha256:" and its SHA-256 in 64 lower-case hex digits');
    }
    if (minSecret && typeof t !== 'string' && !HASHED.test(secret) && secret.length < minSecret) throw new ConfigError(`${at}.secret`, `must be at least ${minSecret} characters (or "sha256:" and its SHA-256)`);
    if (secrets.has(secret)) throw new ConfigError(`${at}.secret`, 'is the secret of an earlier token');
    secrets.add(secret);
    if (scope !== '*') {
      if (!Array.isArray(scope) || scope.length === 0) throw new ConfigError(`${at}.policies`, 'must be "*" or a non-empty array of policy names');
      for (const [j, p] of scope.entries()) {
        if (typeof p !== 'string' || p === '' || (policies && !policies.includes(p))) throw new ConfigError(`${at}.policies[${j}]`, `must name a configured policy${policies ? ` (${policies.join(', ')})` : ''}`);
      }
    }
    if (!Array.isArray(rights) || rights.length === 0) throw new ConfigError(`${at}.rights`, `must be a non-empty array of ${RIGHTS.join(', ')}`);
    for (const [j, r] of rights.entries()) if (!RIGHTS.includes(r)) throw new ConfigError(`${at}.rights[${j}]`, `must be one of ${RIGHTS.join(', ')}`);
    return { grant: { name, policies: scope === '*' ? '*' : new Set(scope), rights: new Set(rights) }, secret };
  });
}

/**
 * PERMIT_TOKENS: comma-separated tokens, each with every right on every policy; or, when it starts with
 * `[`, a JSON array of scoped tokens (`{ name, secret, policies, rights }`; an array as such in a
 * Worker's vars). Checked now: a ConfigError names the token and field and never holds a secret.
 * `policies`: the configured policy names, so that a misspelt one is refused too. What permitApp's
 * `tokens` takes, e.g. `permitApp({ limiter, tokens: parsePermitTokens(process.env.PERMIT_TOKENS) })`.
 */
export function parsePermitTokens(raw: unknown, policies?: readonly string[]): (string | PermitToken)[] {
  let tokens: unknown = raw ?? '';
  if (typeof tokens === 'string' && tokens.trim().startsWith('[')) {
    try {
      tokens = JSON.parse(tokens);
    } catch {
      // JSON.parse's message quotes the text around the error, which may be a secret.
      throw new ConfigError('PERMIT_TOKENS', 'starts with "[" but is not valid JSON (a JSON array of { name, secret, policies, rights })');
    }
  } else if (typeof tokens === 'string' && tokens.trim().startsWith('{')) {
    throw new ConfigError('PERMIT_TOKENS', 'starts with "{": scoped tokens are a JSON array, [{ name, secret, policies, rights }, ...]');
  } else if (typeof tokens === 'string') {
    tokens = tokens.split(',').map((t) => t.trim()).filter(Boolean);
  }
  if (!Array.isArray(tokens)) throw new ConfigError('PERMIT_TOKENS', 'must be comma-separated tokens or a JSON array of { name, secret, policies, rights }');
  // In the JSON form every token is scoped and named: a bare string there is a mistake, not a token of every right.
  const bare = typeof raw !== 'string' || raw.trim().startsWith('[') ? tokens.findIndex((t) => typeof t !== 'object') : -1;
  if (bare >= 0) throw new ConfigError(`PERMIT_TOKENS[${bare}]`, 'must be an object with name, secret, policies and rights');
  checkTokens(tokens as (string | PermitToken)[], 'PERMIT_TOKENS', policies, MIN_SECRET);
  return tokens as (string | PermitToken)[];
}

export interface TokenChecker {
  /** The grant of the token the Authorization header carries, or undefined when it carries none that is configured. */
  check(authorization: string | undefined): Promise<Grant | undefined>;
  readonly configured: boolean;
}

/**
 * Checks bearer tokens against checked ones (plain secrets are hashed once, at the first check). A plain
 * secret equal to another token's hashed one makes every check reject with a ConfigError naming
 * `<field>[i].secret` (the Node and Lambda entries refuse it at start: functions/app/token-twins.ts).
 */
export function tokenChecker(tokens: readonly CheckedToken[], field = 'tokens'): TokenChecker {
  let digests: Promise<Uint8Array[]> | undefined;
  const digestAll = async () => {
    const all = await Promise.all(tokens.map((t) => (HASHED.test(t.secret) ? Uint8Array.from(t.secret.slice(7).match(/../g)!, (h) => parseInt(h, 16)) : digest(t.secret))));
    const hex = all.map((d) => d.join());
    const twice = hex.findIndex((h, i) => hex.indexOf(h) !== i);
    if (twice >= 0) throw new ConfigError(`${field}[${twice}].secret`, 'is the secret of an earlier token (one plain, one hashed)');
    return all;
  };
  return {
    configured: tokens.length > 0,
    async check(authorization) {
      const all = await (digests ??= digestAll());
      if (all.length === 0 || !authorization) return undefined;
      const m = /^Bearer +([^\s]+) *$/i.exec(authorization);
      const presented = await digest(m ? m[1]! : '');
      // Compared with every token, and the match kept by arithmetic, not a branch: where it is in the
      // list, and whether there is one, do not show. Secrets are unique, so at most one matches.
      let found = 0;
      for (let i = 0; i < all.length; i++) found |= same32(presented, all[i]!) * (i + 1);
      return m && found ? tokens[found - 1]!.grant : undefined;
    },
  };
}

const grants = new WeakMap<Request, Grant>();

/** The grant of the request's token, once the /v1 bearer check has passed. */
export function grantOf(c: Context): Grant | undefined {
  return grants.get(c.req.raw);
}

export function setGrant(c: Context, grant: Grant): void {
  grants.set(c.req.raw, grant);
}

/** The 403 when the request's token lacks the right `route` needs (undefined: it has it). */
export function missingRight(c: Context, route: Route): Response | undefined {
  const grant = grantOf(c);
  const right = ROUTE_RIGHTS[route];
  if (grant?.rights.has(right)) return undefined;
  return problemResponse('forbidden', `the token ${grant?.name ?? ''} lacks the \`${right}\` right, which ${route} needs; nothing was read or changed`, { right });
}

/** The 403 when the request's token may not use `policy` (checked before the policy is looked up, so a token learns nothing of the others). */
export function missingPolicy(c: Context, policy: string): Response | undefined {
  const scope = grantOf(c)?.policies;
  if (scope === '*' || scope?.has(policy)) return undefined;
  return problemResponse('forbidden', `the token ${grantOf(c)?.name ?? ''} may not use the policy ${JSON.stringify(policy.slice(0, 64))}; nothing was read or changed`, { policy: policy.slice(0, 64) });
}

/** Refuses, before the handler reads anything, a token that has none of the rights of these routes. */
export function guard(...routes: Route[]): MiddlewareHandler {
  return async function guardRoute(c, next) {
    const missing = routes.map((r) => missingRight(c, r));
    if (missing.every(Boolean)) return missing[0];
    return next();
  };
}
