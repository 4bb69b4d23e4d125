// Helpers that derive a rate-limit key from a request, for the middleware's `key` option, and the
// client-address logic the gateway also uses for X-Forwarded-For.
import type { Context } from 'hono';
import { ConfigError } from '../errors.js';
import { canonicalIp, formatIp, inCidr, ipv6Subnet, parseCidr, parseIp, parseIpPort, type Cidr } from './ip.js';

/** How clientIp reads the client address: which X-Forwarded-For hops to trust. */
export interface ClientIpOptions {
  /**
   * Which X-Forwarded-For hops to believe (a client can write anything there).
   * - `0` (default): ignore the header.
   * - `N`: you run exactly N proxies that append to it; the Nth address from the right is the client.
   * - CIDR list (e.g. `['10.0.0.0/8', '2600:1f00::/24']`): the proxies you trust. Only when the direct peer
   *   is in it is the header read, right to left, skipping trusted hops: the right-most untrusted hop is
   *   the client.
   * Entries may carry a port (`203.0.113.7:51234`, `[2001:db8::1]:443`), which is dropped. An entry that
   * is not an address stops the walk: the nearest trusted hop to its right counts as the client.
   * @default 0
   */
  trustedProxies?: number | readonly string[];
}

/** Options of ipKey: the trusted proxies, and the IPv6 prefix clients share a bucket by. */
export interface IpKeyOptions extends ClientIpOptions {
  /**
   * IPv6 clients are keyed by this prefix (one host usually owns a whole /64, so a per-address key lets
   * it pick a fresh address per request). `false` keys every address on its own. IPv4 is always per address.
   * @default 64
   */
  ipv6Subnet?: number | false;
}

type LambdaEvent = {
  requestContext?: { identity?: { sourceIp?: string }; http?: { sourceIp?: string }; elb?: unknown };
};

/** Compiled once per helper, so requests do not parse CIDRs again. */
type Trust = { hops: number } | { ranges: Cidr[] };

export function compileTrust(trusted: ClientIpOptions['trustedProxies']): Trust {
  if (trusted === undefined) return { hops: 0 };
  if (typeof trusted === 'number') {
    if (!Number.isInteger(trusted) || trusted < 0) throw new RangeError(`[edge-limiter] trustedProxies must be a non-negative integer or a CIDR list, got ${trusted}`);
    return { hops: trusted };
  }
  return { ranges: trusted.map((r) => parseCidr(r)) };
}

function forwardedFor(c: Context): string[] {
  const header = c.req.header('x-forwarded-for');
  return header ? header.split(',').map((s) => s.trim()).filter(Boolean) : [];
}

/**
 * The chain of addresses that reached us, oldest first, ending with the direct peer, and whether the
 * platform itself vouches for the last entry (Cloudflare, API Gateway, ALB, the socket).
 */
/** The request came through Cloudflare (Workers set `request.cf`), so CF-Connecting-IP is the platform's. */
export function onCloudflare(req: Request): boolean {
  const cf = (req as Request & { cf?: unknown }).cf;
  return typeof cf === 'object' && cf !== null;
}

function peerAndHeader(c: Context, trust: Trust): { peer: string | undefined; xff: string[]; cloudflare: boolean } {
  if (onCloudflare(c.req.raw)) return { peer: c.req.header('cf-connecting-ip') ?? undefined, xff: [], cloudflare: true };
  const env = (c.env ?? {}) as { event?: LambdaEvent; incoming?: { socket?: { remoteAddress?: string } } };
  const rc = env.event?.requestContext;
  // The header is read only when something may use it: trusted proxies, or an ALB's appended entry.
  const xff = rc?.elb || !('hops' in trust) || trust.hops > 0 ? forwardedFor(c) : [];
  if (rc) {
    if (rc.http?.sourceIp) return { peer: rc.http.sourceIp, xff, cloudflare: false };
    if (rc.identity?.sourceIp) return { peer: rc.identity.sourceIp, xff, cloudflare: false };
    // Behind an ALB the peer is the address the ALB appended to X-Forwarded-For (its right-most entry).
    if (rc.elb) return { peer: xff.at(-1), xff: xff.slice(0, -1), cloudflare: false };
  }
  return { peer: env.incoming?.socket?.remoteAddress ?? undefined, xff, cloudflare: false };
}

/**
 * The client's address chain as trust allows: `[client, trusted proxies..., peer]`, each entry the
 * canonical text of an address (ports dropped, IPv4-mapped IPv6 as IPv4). The first entry is the
 * client; the rest are hops we trust, so the gateway can forward exactly this as X-Forwarded-For.
 * Text that is not an address is never an entry: the walk from the peer stops at it, so the nearest
 * trusted hop to its right is the client, and with no peer address the chain is empty.
 */
export function trustedChain(c: Context, trust: Trust): string[] {
  const { peer, xff, cloudflare } = peerAndHeader(c, trust);
  const peerIp = peer === undefined ? undefined : canonicalIp(peer);
  if (cloudflare) return peerIp ? [peerIp] : [];
  if ('hops' in trust) {
    // N proxies of ours appended to the header: the Nth entry from the right is the client (the peer
    // being the last proxy). With no peer address (an unknown runtime) the header is all there is.
    if (!peerIp && trust.hops === 0) return [];
    const chain = peerIp ? [peerIp] : [];
    for (let i = xff.length - 1; i >= Math.max(0, xff.length - trust.hops); i--) {
      const ip = canonicalIp(xff[i]!);
      if (!ip) break;
      chain.unshift(ip);
    }
    return chain;
  }
  if (!peerIp) return [];
  // Walk left from the peer while the hop is a proxy we trust; stop at the first one we do not.
  const chain = [peerIp];
  let hop = parseIp(peerIp)!;
  for (let i = xff.length - 1; i >= 0 && trust.ranges.some((r) => inCidr(hop, r)); i--) {
    const left = parseIpPort(xff[i]!);
    if (!left) break; // not an address to the left of a trusted hop: the trusted hop is as far as we can see
    chain.unshift(formatIp(left));
    hop = left;
  }
  return chain;
}

/**
 * The client's IP address, from what the platform vouches for:
 * - Cloudflare Workers: `CF-Connecting-IP` (set by Cloudflare; a client cannot forge it there).
 * - AWS Lambda: the API Gateway v1/v2 or Function URL `sourceIp`; behind an ALB, the address the ALB
 *   appended to X-Forwarded-For (its right-most entry).
 * - Node: the socket's remote address.
 * X-Forwarded-For is consulted only as `trustedProxies` allows. The address is canonical text (no port,
 * IPv4-mapped IPv6 as IPv4, IPv6 per RFC 5952). Returns undefined when no address is known.
 */
export function clientIp(c: Context, options: ClientIpOptions = {}): string | undefined {
  return trustedChain(c, compileTrust(options.trustedProxies))[0];
}

/**
 * A `key` function for the middleware whose `missing` says what a request lacks when it answers
 * undefined: the middleware's 400 (`invalid-request`) gives it as the detail.
 */
export type KeyFunction<R> = ((c: Context) => R) & { readonly missing: string };

/**
 * A `key` function for the middleware: the client IP (see clientIp), canonicalised; IPv6 addresses are
 * keyed by their /64 unless `ipv6Subnet` says otherwise.
 */
export function ipKey(options: IpKeyOptions = {}): KeyFunction<string | undefined> {
  const trust = compileTrust(options.trustedProxies);
  const subnet = options.ipv6Subnet ?? 64;
  if (subnet !== false && (!Number.isInteger(subnet) || subnet < 1 || subnet > 128)) {
    throw new RangeError(`[edge-limiter] ipv6Subnet must be an integer from 1 to 128, or false; got ${String(subnet)}`);
  }
  const key = (c: Context) => {
    // Canonical already (trustedChain holds only addresses): only IPv6 needs its subnet.
    const addr = trustedChain(c, trust)[0];
    if (addr === undefined || subnet === false || !addr.includes(':')) return addr;
    return ipv6Subnet(parseIp(addr)!, subnet);
  };
  return Object.assign(key, { missing: 'no client address is known for the request' });
}

/** Options of headerKey. */
export interface HeaderKeyOptions {
  /**
   * Key by the SHA-256 of the value (base64url) instead of the value itself, so API keys and other
   * secrets are never written to the store. @default true
   */
  hash?: boolean;
}

async function sha256Base64url(value: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(value)));
  return btoa(String.fromCharCode(...digest)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/**
 * A `key` function for the middleware: an API-key header such as `x-api-key`, hashed by default.
 * A client can send any value in an unauthenticated header, so every new value is a new bucket: key by a
 * header only after something has checked it (or rate-limit by IP as well). A value of nothing but
 * commas and whitespace (empty copies of the header, joined) is no key: the request gets the 400.
 * Throws a ConfigError when made with a `name` that is no HTTP field name (an RFC 9110 token).
 */
export function headerKey(name: string, options: HeaderKeyOptions = {}): KeyFunction<Promise<string | undefined>> {
  // An RFC 9110 token: any other name fails every request (a 500), so it fails here.
  if (typeof name !== 'string' || !/^[!#$%&'*+.^`|~\w-]+$/.test(name)) throw new ConfigError('headerKey(name)', `must be an HTTP field name (RFC 9110 token), got ${JSON.stringify(name)}`);
  const hash = options.hash ?? true;
  const key = async (c: Context) => {
    const v = c.req.header(name);
    // Only separators: empty copies of the header, which the platform joined with ', '.
    if (!v || /^[\s,]*$/.test(v)) return undefined;
    return hash ? sha256Base64url(v) : v;
  };
  return Object.assign(key, { missing: `the request has no ${name.toLowerCase()} header (or an empty one) to identify the client` });
}
