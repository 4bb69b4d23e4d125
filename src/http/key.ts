// Helpers that derive a rate-limit key from a request, for the middleware's `key` option.
import type { Context } from 'hono';

export interface ClientIpOptions {
  /**
   * How many proxies you run in front of this app that append to X-Forwarded-For. 0 ignores the header
   * (a client can write anything there); N takes the Nth address from the right.
   * @default 0
   */
  trustedProxies?: number;
}

type LambdaEvent = {
  requestContext?: { identity?: { sourceIp?: string }; http?: { sourceIp?: string }; elb?: unknown };
};

function fromForwardedFor(c: Context, hops: number): string | undefined {
  if (hops < 1) return undefined;
  const header = c.req.header('x-forwarded-for');
  if (!header) return undefined;
  const parts = header.split(',').map((s) => s.trim()).filter(Boolean);
  return parts[parts.length - hops];
}

/**
 * The client's IP address, from what the platform vouches for:
 * - Cloudflare Workers: `CF-Connecting-IP` (set by Cloudflare; a client cannot forge it there).
 * - AWS Lambda: the API Gateway v1/v2 or Function URL `sourceIp`; behind an ALB, the address the ALB
 *   appended to X-Forwarded-For (its rightmost entry).
 * - Node: the socket's remote address.
 * With `trustedProxies: N`, X-Forwarded-For is consulted first, N hops from the right.
 * Returns undefined when no address is known.
 */
export function clientIp(c: Context, options: ClientIpOptions = {}): string | undefined {
  const forwarded = fromForwardedFor(c, options.trustedProxies ?? 0);
  if (forwarded) return forwarded;
  const raw = c.req.raw as Request & { cf?: unknown };
  if (raw.cf && typeof raw.cf === 'object') return c.req.header('cf-connecting-ip') ?? undefined;
  const env = (c.env ?? {}) as { event?: LambdaEvent; incoming?: { socket?: { remoteAddress?: string } } };
  const rc = env.event?.requestContext;
  if (rc) {
    if (rc.http?.sourceIp) return rc.http.sourceIp;
    if (rc.identity?.sourceIp) return rc.identity.sourceIp;
    if (rc.elb) return fromForwardedFor(c, 1);
  }
  return env.incoming?.socket?.remoteAddress ?? undefined;
}

/** A `key` function for the middleware: the client IP (see clientIp). */
export const ipKey = (options: ClientIpOptions = {}) => (c: Context) => clientIp(c, options);

/** A `key` function for the middleware: the value of an API-key header, e.g. `x-api-key`. */
export const headerKey = (name: string) => (c: Context) => c.req.header(name) || undefined;
