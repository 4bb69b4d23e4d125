// The deployable app shared by the Worker, Lambda and Node entries: the permit API, /healthz, and in
// gateway mode every other path gated by GATE_POLICY and forwarded to GATE_ORIGIN.
import type { Context, Hono, MiddlewareHandler } from 'hono';
import { HonoBase } from 'hono/hono-base';
import type { AppConfig } from './env.js';
import { inEnv } from './env.js';
import { createLimiter, type AuditEvent, type Limiter, type LimiterOptions, type StoreStatusEvent } from '../../src/limiter.js';
import type { Store } from '../../src/store.js';
import { createForwarder, type ForwardSend } from '../../src/http/gateway.js';
import { headerKey, ipKey } from '../../src/http/key.js';
import { rateLimit } from '../../src/http/middleware.js';
import { addPermitRoutes } from '../../src/http/permit-app.js';
import { problemResponse } from '../../src/http/problem.js';
import { CONTROL, HOST } from '../../src/http/fields.js';
import { createDecisionStats, type DecisionStats } from '../../src/limiter/decision-stats.js';
import { StrictPatternRouter } from './router.js';
import { composeOnDecision, serveStats } from './stats.js';

export interface BuiltApp {
  app: Hono;
  limiter: Limiter;
  /** This node's decision counts and most refused keys, served at GET /v1/stats. */
  stats: DecisionStats;
}

/**
 * A Hono app routed by PatternRouter's way (hono/tiny's router: one regular expression per route, tried
 * in order), strict about the trailing slash as Hono's default router is (./router.ts). Hono's default
 * router (SmartRouter) ships RegExpRouter and TrieRouter; RegExpRouter alone was 1.3 KiB more of the
 * Worker's 60 KiB gzip budget than PatternRouter (measured with `wrangler deploy --dry-run` and gzip -9),
 * which the reservation horizon of issue 31 needed. The app has a few dozen routes, so trying them in
 * order costs a request about a microsecond (see the bench).
 */
const routerApp = (): Hono => new HonoBase({ router: new StrictPatternRouter() });

export type LogSink = (level: 'info' | 'warn' | 'error', line: Record<string, unknown>) => void;

const consoleLog: LogSink = (level, line) => console[level](JSON.stringify(line));

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** One log line when decisions start failing because of the store, one when it decides again. */
export function storeStatusLogger(log: LogSink): (event: StoreStatusEvent) => void {
  return (event) => {
    if (event.status === 'down') {
      log('error', { msg: 'store unavailable: decisions follow each policy\'s onStoreError until it answers again', store: event.store, error: errorText(event.error) });
    } else {
      log('info', { msg: 'store recovered', store: event.store, downMs: Math.round(event.downMs) });
    }
  };
}

/**
 * One JSON line per administrative action (the limiter's onAudit): the token's name (the actor the
 * permit API passes), the policy, the key, what it left, when, and the error when the store failed.
 * Then `next`, e.g. the metrics counter.
 */
export function auditLogger(log: LogSink, next?: (event: AuditEvent) => void): (event: AuditEvent) => void {
  return (e) => {
    log(e.error === undefined ? 'info' : 'warn', {
      msg: 'audit',
      action: e.action,
      token: e.actor,
      policy: e.policy,
      key: e.key,
      at: new Date(e.atMs).toISOString(),
      before: e.before,
      after: e.after,
      ...(e.error === undefined ? {} : { error: errorText(e.error) }),
    });
    next?.(e);
  };
}

export interface BuildOptions {
  /** Structured log sink. @default JSON lines on the console */
  log?: LogSink;
  /** Passed to the limiter, e.g. metrics. Off by default (it takes the memory store off its synchronous path). */
  onDecision?: LimiterOptions['onDecision'];
  /**
   * The gateway's transport to the origin. The Node and Lambda entries pass node-send.ts's (streams
   * bodies in bounded memory); without one the gateway uses fetch (right on Workers).
   */
  send?: ForwardSend;
  /** Each administrative action, after its audit log line (the Node server counts them on its metrics port). */
  onAudit?: (event: AuditEvent) => void;
  /**
   * The OpenAPI document to serve at GET /v1/openapi.json: the Node and Lambda entries pass openApiJson;
   * the Worker passes none, its platform serving the same file as a static asset (wrangler.toml [assets]).
   */
  openApiJson?: string;
  /**
   * A gated request's refusal beyond the forwarder's own, asked before the limiter charges: the Node and
   * Lambda entries pass keyInConnection (gate-refusals.ts), which the Worker does not need.
   */
  refuseGated?: (c: Context) => Response | undefined;
}

/**
 * Host rules (RFC 9112 §3.2) and field values (RFC 9110 §5.5) on every entry, before any route and before
 * the limiter: 400 invalid-request for a Host that is not one host name or IP literal with an optional
 * port (empty; several joined with ", " or "; " by a platform; "x/admin?" or "a@evil.example", which
 * would rewrite the URL), and for a header value holding a control character other than HTAB. A request
 * without Host passes here: a Lambda event may carry none, and the Node server refuses an HTTP/1.1
 * request without one itself.
 */
export const hostRules: MiddlewareHandler = async function hostRules(c, next) {
  const host = c.req.header('host');
  if (host !== undefined && !HOST.test(host)) {
    return problemResponse('invalid-request', host === '' ? 'the Host header is empty' : /[\s,;]/.test(host) ? 'a request must carry one Host header, not several' : 'the Host header is not a host name or address with an optional port');
  }
  for (const [name, value] of c.req.raw.headers) if (CONTROL.test(value)) return problemResponse('invalid-request', `the ${name} header holds a control character`);
  return next();
};

export function buildLimiter(config: AppConfig, store: Store, options: BuildOptions = {}): Limiter {
  const log = options.log ?? consoleLog;
  try {
    return createLimiter({
      store,
      policies: config.policies,
      ...config.limiter,
      onStoreStatus: storeStatusLogger(log),
      onAudit: auditLogger(log, options.onAudit),
      ...(options.onDecision ? { onDecision: options.onDecision } : {}),
    });
  } catch (err) {
    throw inEnv(err);
  }
}

export function buildApp(config: AppConfig, store: Store, options: BuildOptions = {}): BuiltApp {
  const log = options.log ?? consoleLog;
  // Counts every decision (LIMITER_TOP_KEYS: and keeps the most refused keys) before options.onDecision sees it.
  const stats = createDecisionStats({ topKeys: config.stats.topKeys, policies: Object.keys(config.policies) });
  const limiter = buildLimiter(config, store, { ...options, onDecision: composeOnDecision(stats.onDecision, options.onDecision) });
  // The Host rules first (a middleware runs only for the routes added after it), then the permit API's
  // routes, with its refusals for a path none serves and for an unexpected error.
  const permits = addPermitRoutes(routerApp(), { limiter, tokens: config.tokens, tokensField: 'PERMIT_TOKENS', log, ...(options.openApiJson === undefined ? {} : { openApiJson: options.openApiJson }) });
  const app = routerApp();
  app.use('*', hostRules);
  app.route('/', permits);
  app.notFound(() => problemResponse('not-found', 'no such route'));
  app.onError((err) => {
    log('error', { msg: 'unhandled error', error: errorText(err) });
    return problemResponse('internal-error', 'an unexpected error occurred');
  });
  serveStats(app, stats);
  const gate = config.gate;
  if (gate) {
    const trustedProxies = gate.trustedProxies;
    // A header key is stored as its SHA-256, never as the raw value (it is often a secret).
    const key = gate.key === 'ip' ? ipKey({ trustedProxies, ipv6Subnet: gate.ipv6Subnet }) : headerKey(gate.key.header);
    const gated = rateLimit({ limiter, policy: gate.policy, key });
    const forward = createForwarder({
      origin: gate.origin,
      timeoutMs: gate.timeoutMs,
      trustedProxies,
      trustForwardedHost: gate.trustForwardedHost ?? false,
      ...(gate.maxBodyBytes === undefined ? {} : { maxBodyBytes: gate.maxBodyBytes }),
      ...(options.send ? { send: options.send } : {}),
    });
    app.all('*', async (c, next) => {
      const path = c.req.path;
      if (path === '/healthz' || path.startsWith('/v1/')) return next();
      // A request the gateway cannot forward is refused before the limiter charges for it.
      const refusal = forward.refuse(c) ?? options.refuseGated?.(c);
      if (refusal) return refusal;
      return gated(c, async () => {
        c.res = await forward(c);
      });
    });
  }
  return { app, limiter, stats };
}
