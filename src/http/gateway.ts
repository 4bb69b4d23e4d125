// Gateway mode's forwarding: a correct HTTP proxy to one origin. It forwards the client's request as
// received (minus hop-by-hop headers), lets the client see the origin's redirects, says who the client
// is in X-Forwarded-For/-Proto/-Host, and answers 502/504 problem+json when the origin fails or is slow.
import type { Context } from 'hono';
import { trustedChain, compileTrust, type ClientIpOptions } from './key.js';
import { problemResponse } from './problem.js';

export interface ForwardOptions {
  /** The origin, e.g. `https://api.internal:8443` (no trailing slash). */
  origin: string;
  /** How long to wait for the origin's response headers, in ms. @default 30000 */
  timeoutMs?: number;
  /** Which X-Forwarded-For hops to believe; see ClientIpOptions. @default 0 */
  trustedProxies?: ClientIpOptions['trustedProxies'];
  /** @default globalThis.fetch */
  fetch?: typeof fetch;
}

// RFC 9110 §7.6.1 hop-by-hop fields, plus the legacy Proxy-Connection. Expect is answered by our own
// server (100-continue) and must not be forwarded: fetch implementations refuse it.
const HOP_BY_HOP = ['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'proxy-authorization', 'proxy-authenticate', 'proxy-connection'];

/** Copies headers without the hop-by-hop ones, including every field the Connection header names. */
function endToEnd(source: Headers, also: readonly string[] = []): Headers {
  const out = new Headers(source);
  const listed = (source.get('connection') ?? '').split(',').map((h) => h.trim().toLowerCase()).filter(Boolean);
  for (const h of [...HOP_BY_HOP, ...listed, ...also]) {
    try {
      out.delete(h);
    } catch {
      // a Connection token that is not a valid header name names nothing we could have copied
    }
  }
  return out;
}

/** Builds the forwarding function once (trust ranges parsed at start-up), to be called per request. */
export function createForwarder(options: ForwardOptions): (c: Context) => Promise<Response> {
  const origin = options.origin.replace(/\/$/, '');
  const timeoutMs = options.timeoutMs ?? 30_000;
  const trust = compileTrust(options.trustedProxies);
  const doFetch = options.fetch ?? ((input: Request) => fetch(input));

  return async function forward(c) {
    const req = c.req.raw;
    const url = new URL(req.url);
    // Host is the origin's; accept-encoding is left to fetch, which decodes what it asks for.
    const headers = endToEnd(req.headers, ['host', 'expect', 'accept-encoding', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host']);
    const chain = trustedChain(c, trust);
    if (chain.length > 0) headers.set('x-forwarded-for', chain.join(', '));
    // A trusted proxy in front may already know the client's scheme and host; otherwise it is ours.
    const viaTrustedProxy = chain.length > 1;
    headers.set('x-forwarded-proto', (viaTrustedProxy && req.headers.get('x-forwarded-proto')?.split(',')[0]?.trim()) || url.protocol.slice(0, -1));
    const host = (viaTrustedProxy && req.headers.get('x-forwarded-host')) || req.headers.get('host');
    if (host) headers.set('x-forwarded-host', host);

    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error('origin timeout')), timeoutMs);
    const hasBody = req.body !== null && req.method !== 'GET' && req.method !== 'HEAD';
    let res: Response;
    try {
      res = await doFetch(
        new Request(`${origin}${url.pathname}${url.search}`, {
          method: req.method,
          headers,
          body: hasBody ? req.body : null,
          redirect: 'manual',
          signal: AbortSignal.any([controller.signal, req.signal]),
          ...(hasBody ? { duplex: 'half' } : {}),
        } as RequestInit),
      );
    } catch {
      if (controller.signal.aborted) {
        return problemResponse('gateway-timeout', `the origin did not answer within ${timeoutMs} ms`, {}, { 'Retry-After': '1' });
      }
      return problemResponse('bad-gateway', 'the origin could not be reached');
    } finally {
      // Only the wait for the response head is bounded: a long download is not cut off.
      clearTimeout(timer);
    }
    const out = endToEnd(res.headers);
    if (out.has('content-encoding')) {
      // fetch has already decoded the body: the encoding and length no longer describe it.
      out.delete('content-encoding');
      out.delete('content-length');
    }
    return new Response(res.body, { status: res.status, statusText: res.statusText, headers: out });
  };
}
