// Gateway mode's forwarding: a correct HTTP proxy to one origin. It forwards the client's request as
// received (minus hop-by-hop headers; its body framed again by the transport, never by the client's
// Content-Length or Transfer-Encoding), lets the client see the origin's redirects, passes a compressed
// response through as the origin encoded it where the transport allows (raw `send`, workerd's fetch),
// says who the client is in X-Forwarded-For/-Proto/-Host (from what the gateway knows, never from what
// an untrusted client wrote), and answers 502/504 problem+json when the origin fails or is slow.
import type { Context } from 'hono';
import { trustedChain, compileTrust, onCloudflare, type ClientIpOptions } from './key.js';
import { problemResponse } from './problem.js';
import { HOST } from './fields.js';

/** Options of createForwarder: the origin, its timeout, the largest body, which forwarded headers to trust, and the transport. */
export interface ForwardOptions {
  /** The origin, e.g. `https://api.internal:8443` (no trailing slash). */
  origin: string;
  /** How long to wait for the origin's response headers, in ms. @default 30000 */
  timeoutMs?: number;
  /** Which X-Forwarded-For hops to believe; see ClientIpOptions. @default 0 */
  trustedProxies?: ClientIpOptions['trustedProxies'];
  /**
   * Your trusted proxies set (or append to) X-Forwarded-Host, so the host the client asked for is the
   * entry the first of them wrote. Otherwise X-Forwarded-Host is the Host header the gateway received.
   * @default false
   */
  trustForwardedHost?: boolean;
  /**
   * The largest request body forwarded, in bytes. A larger declared Content-Length is refused by
   * `refuse` (413, before anything is charged); a body that streams past it without one is cut off,
   * the forward aborted, and the answer is 413 too. @default no limit
   */
  maxBodyBytes?: number;
  /**
   * Sends the request with fetch, which, as the gateway asks, follows no redirect. What happens to a
   * compressed response depends on the runtime: on Cloudflare Workers (workerd, told by its user agent) the
   * client's Accept-Encoding is forwarded and the origin's encoded body reaches the client byte for byte,
   * with its Content-Encoding and Content-Length; elsewhere (Node's undici, Deno, Bun) fetch decodes what
   * it asked for itself, so Accept-Encoding is left to it and the gateway drops the Content-Encoding and
   * Content-Length that no longer describe the body. On Node, fetch (undici) clones a request whose
   * redirect mode is not "error" and so holds a streamed body in memory until the forward ends: pass
   * `send` there, or set `maxBodyBytes`. @default globalThis.fetch
   */
  fetch?: typeof fetch;
  /**
   * A raw HTTP transport used instead of fetch: it sends the headers given (the client's Accept-Encoding
   * included), frames and streams the body itself (`length` when known, else chunked), follows no
   * redirect and returns the origin's response undecoded. The Node and Lambda entries use one built on
   * node:http (functions/app/node-send.ts).
   */
  send?: ForwardSend;
}

/** What a `send` transport is given. */
export interface ForwardInit {
  method: string;
  /** End-to-end headers. Never Content-Length or Transfer-Encoding: framing the body is the transport's. */
  headers: Headers;
  /** The request body, or null when it has none (always for GET and HEAD). */
  body: ReadableStream<Uint8Array> | null;
  /**
   * The body's exact length in bytes when the client declared it (a Content-Length, which the server's
   * parser held the body to): send it with that Content-Length and fail if the body is longer or
   * shorter. Null: the length is not known, send the body chunked.
   */
  length: number | null;
  signal: AbortSignal;
}

export type ForwardSend = (url: string, init: ForwardInit) => Promise<Response>;

/**
 * Passes a body through unchanged until more than `max` bytes have passed or reading it fails (the
 * client went away); then calls `fail` (which must abort the forward) and fails the stream. The abort
 * comes first because a failed body is not enough everywhere: workerd ends the upload as if the body
 * had ended there, so the origin would get a complete, truncated request.
 */
function limited(body: ReadableStream<Uint8Array>, max: number, fail: (err: unknown) => void): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let bytes = 0;
  let released = false;
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let err: unknown;
        try {
          const { done, value } = await reader.read();
          if (done) return controller.close();
          if ((bytes += value.byteLength) <= max) return controller.enqueue(value);
          err = new RangeError(`the request body exceeds ${max} bytes`);
        } catch (e) {
          err = e;
        }
        // Stop reading without cancelling the client's stream: the server can still answer 413.
        released = true;
        reader.releaseLock();
        fail(err);
        controller.error(err);
      },
      cancel: (reason) => (released ? undefined : reader.cancel(reason)),
    },
    { highWaterMark: 0 },
  );
}

// RFC 9110 §7.6.1 hop-by-hop fields, plus the legacy Proxy-Connection. Expect is answered by our own
// server (100-continue) and must not be forwarded: fetch implementations refuse it.
const HOP_BY_HOP = ['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'proxy-authorization', 'proxy-authenticate', 'proxy-connection'];

/**
 * The request's framing fields. None is ever copied from the client: the transport frames the body
 * it sends itself, from the length `bodyFraming` read (so a `Connection: content-length` that struck
 * the header from the copy cannot leave a body unframed, and no client value reaches the origin).
 */
const FRAMING = ['content-length', 'transfer-encoding'];

/**
 * How the request's body is framed, read from the head alone (RFC 9112 §6): `length` is the
 * declared Content-Length, null when the body is chunked (Transfer-Encoding), 0 when it has neither
 * (no body). A string is why it cannot be forwarded: a Content-Length that is not one decimal number,
 * or both fields (RFC 9112 §6.3 allows a server to refuse that; a proxy must, or the origin may frame
 * the body differently from us).
 */
function bodyFraming(headers: Headers): { length: number | null } | string {
  const te = headers.get('transfer-encoding');
  const cl = headers.get('content-length');
  if (te !== null && cl !== null) return 'a request with both Content-Length and Transfer-Encoding';
  if (te !== null) return { length: null };
  // A Headers value has no surrounding whitespace; 15 digits stay below 2^53.
  return cl === null ? { length: 0 } : /^\d{1,15}$/.test(cl) ? { length: +cl } : 'a Content-Length that is no byte count';
}

/**
 * Headers in which a client can claim an address, a scheme, a host, a port, the URL it asked for
 * (X-Original-URL, X-Rewrite-URL: some frameworks and auth proxies route or authorize by them) or a
 * TLS client certificate (Client-Cert and Client-Cert-Chain, RFC 9440, and the older SSL-Client-Cert). None is
 * forwarded as the client wrote it: X-Forwarded-For/-Proto/-Host and X-Real-IP are set again from what
 * the gateway knows, CF-Connecting-IP on Workers from the platform's value, the rest are dropped. A
 * claim is a name in CLIENT_CLAIMS or one starting with a CLAIM_PREFIXES family, compared without case
 * and with `_` read as `-` (a CGI-style origin reads X_Forwarded_For as X-Forwarded-For).
 * X-Client- is no family: X-Client-Id and X-Client-Version are common application headers. docs/gateway.md
 * names both lists (test/http/gateway.test.ts holds them the same).
 */
export const CLAIM_PREFIXES: readonly string[] = ['x-forwarded-', 'x-original-', 'x-envoy-', 'x-real-', 'x-cluster-client-', 'cf-'];

export const CLIENT_CLAIMS: readonly string[] = [
  'forwarded',
  'forwarded-for',
  'x-forwarded',
  'front-end-https',
  'x-url-scheme',
  'x-scheme',
  'x-client-ip',
  'x-client-port',
  'x-originating-ip',
  'x-remote-addr',
  'x-remote-ip',
  'client-ip',
  'true-client-ip',
  'fastly-client-ip',
  'fly-client-ip',
  'x-proxyuser-ip',
  'x-appengine-user-ip',
  'x-azure-clientip',
  'x-azure-socketip',
  'x-host',
  'x-rewrite-url',
  'client-cert',
  'client-cert-chain',
  'ssl-client-cert',
  'x-ssl-client-cert',
  'x-client-cert',
];

/** A field name as the gateway compares it: lower case, `_` read as `-`, no surrounding whitespace. */
const dash = (name: string) => name.trim().toLowerCase().replace(/_/g, '-');

/** Whether a header is a client's claim (see CLIENT_CLAIMS). */
export function isClientClaim(name: string): boolean {
  const n = dash(name);
  return CLIENT_CLAIMS.includes(n) || CLAIM_PREFIXES.some((p) => n.startsWith(p));
}

/**
 * The entry the first of `proxies` trusted proxies wrote in a list header that each of them sets or
 * appends to (X-Forwarded-Proto, X-Forwarded-Host): counted from the right as their X-Forwarded-For
 * hops are, or the left-most entry when fewer are left (a proxy set the header, dropping what was
 * before). Entries left of it were written by the client.
 */
function fromProxies(header: string | null, proxies: number): string | undefined {
  if (!header || proxies < 1) return undefined;
  const list = header.split(',');
  return list[Math.max(0, list.length - proxies)]!.trim();
}

/**
 * Copies headers without the hop-by-hop ones, including every field the Connection header names, and
 * without `also`. A name is compared with `_` read as `-`, as claims are (isClientClaim): an origin
 * stack that reads Transfer_Encoding as Transfer-Encoding would frame the body by the client's field.
 */
function endToEnd(source: Headers, also: readonly string[] = []): Headers {
  const out = new Headers(source);
  const drop = [...HOP_BY_HOP, ...(source.get('connection') ?? '').split(','), ...also].map(dash);
  for (const name of source.keys()) if (drop.includes(dash(name))) out.delete(name);
  return out;
}

/**
 * Whether fetch responses keep their encoding on the way to the client: true in workerd (Cloudflare
 * Workers, where `navigator.userAgent` is "Cloudflare-Workers"). workerd serves a Response encoded as its
 * Content-Encoding says, and a fetched body that is returned unread with the same Content-Encoding is
 * passed through as the origin's bytes, not decoded and encoded again; its Content-Length stays right.
 * (A body that something reads or replaces is encoded again: still what Content-Encoding says.) It
 * decodes only gzip and br itself, so any other coding the client accepts passes through untouched too.
 * Other runtimes' fetch (Node's undici, Deno, Bun) decodes the body and their servers send it as it is,
 * so there the encoding headers must go. Checked once, when the forwarder is built.
 */
function keepsEncoding(): boolean {
  return typeof navigator !== 'undefined' && navigator.userAgent === 'Cloudflare-Workers';
}

/**
 * The Accept-Encoding the client sent, when the request carries another. Cloudflare replaces the header a
 * Worker sees (with "br, gzip", what its edge can re-encode for the client; Miniflare does the same) and
 * keeps the client's own in `request.cf.clientAcceptEncoding` ("" if the client sent none). Forwarding
 * that lets the origin choose a coding the client accepts, so its bytes reach the client unchanged.
 */
function replacedAcceptEncoding(req: Request): string | undefined {
  const original = (req as Request & { cf?: { clientAcceptEncoding?: unknown } }).cf?.clientAcceptEncoding;
  return typeof original === 'string' ? original : undefined;
}

/**
 * Methods no fetch implementation sends (fetch refuses them: CONNECT, TRACE, TRACK), so the gateway
 * cannot forward them. TRACE would also echo the request, credentials included, to the client.
 */
const UNFORWARDABLE = new Set(['CONNECT', 'TRACE', 'TRACK']);

/** What createForwarder returns: a handler that forwards a request to the origin, and the check to run before charging for it. */
export interface Forwarder {
  /** Forwards the request to the origin; a request `refuse` refuses is answered with that refusal. */
  (c: Context): Promise<Response>;
  /**
   * The answer to a request that cannot be forwarded, decided from its head alone: `501
   * method-not-implemented` for CONNECT, TRACE and TRACK; `400 invalid-request` for a GET or HEAD with
   * a body (a Content-Length over 0, or any Transfer-Encoding), for both Content-Length and
   * Transfer-Encoding, and for a Content-Length that is not a byte count; `413 payload-too-large` for a
   * Content-Length over `maxBodyBytes`. Undefined when it can be forwarded. Call it before a limiter
   * charges for the request.
   */
  refuse(c: Context): Response | undefined;
}

/** Builds the forwarding function once (trust ranges parsed at start-up), to be called per request. */
export function createForwarder(options: ForwardOptions): Forwarder {
  const origin = options.origin.replace(/\/$/, '');
  const timeoutMs = options.timeoutMs ?? 30_000;
  const trust = compileTrust(options.trustedProxies);
  const trustForwardedHost = options.trustForwardedHost ?? false;
  const { send, maxBodyBytes } = options;
  if (maxBodyBytes !== undefined && !(Number.isSafeInteger(maxBodyBytes) && maxBodyBytes >= 0)) {
    throw new RangeError(`[edge-limiter] maxBodyBytes must be a non-negative integer, got ${String(maxBodyBytes)}`);
  }
  const doFetch = options.fetch ?? ((url: string, init: RequestInit) => fetch(url, init));
  // A raw `send` returns the origin's response undecoded; workerd's fetch passes its encoding through.
  const passEncoding = send !== undefined || keepsEncoding();
  const tooLarge = () => problemResponse('payload-too-large', `the request body may be at most ${maxBodyBytes} bytes`);

  /** The refusal of a request that cannot be forwarded, else its body's framing (see `refuse`). */
  function check(c: Context): Response | { length: number | null } {
    const method = c.req.method.toUpperCase();
    if (UNFORWARDABLE.has(method)) return problemResponse('method-not-implemented', `the gateway does not forward ${method} requests`);
    const framing = bodyFraming(c.req.raw.headers);
    if (typeof framing === 'string') return problemResponse('invalid-request', `the gateway does not forward ${framing}`);
    // A GET or HEAD body is refused, not dropped: dropping it would change the request silently, and an
    // origin that ignores such a body's framing (it has no defined meaning, RFC 9110 §9.3.1) would read
    // the body as a request of its own.
    if ((method === 'GET' || method === 'HEAD') && framing.length !== 0) return problemResponse('invalid-request', `the gateway does not forward a ${method} request with a body`);
    if (maxBodyBytes !== undefined && framing.length !== null && framing.length > maxBodyBytes) return tooLarge();
    return framing;
  }

  function refuse(c: Context): Response | undefined {
    const checked = check(c);
    return checked instanceof Response ? checked : undefined;
  }

  async function forward(c: Context): Promise<Response> {
    const checked = check(c);
    if (checked instanceof Response) return checked;
    // A length, or null for chunked; GET and HEAD have none (0).
    const { length } = checked;
    const req = c.req.raw;
    const url = new URL(req.url);
    // Host is the origin's. Where the origin's encoding reaches the client (`send`, workerd) the client's
    // Accept-Encoding goes on; elsewhere fetch decodes what it asks for, so Accept-Encoding is left to it.
    const headers = endToEnd(req.headers, ['host', 'expect', ...FRAMING, ...(passEncoding ? [] : ['accept-encoding']), ...[...req.headers.keys()].filter(isClientClaim)]);
    const replaced = passEncoding && headers.has('accept-encoding') ? replacedAcceptEncoding(req) : undefined;
    if (replaced) headers.set('accept-encoding', replaced);
    else if (replaced === '') headers.delete('accept-encoding');
    const chain = trustedChain(c, trust);
    if (chain.length > 0) {
      headers.set('x-forwarded-for', chain.join(', '));
      headers.set('x-real-ip', chain[0]!);
      if (onCloudflare(req)) headers.set('cf-connecting-ip', chain[0]!);
    }
    // The trusted proxies in front (chain.length - 1 of them) know the client's scheme: the first one's
    // entry counts. With none, the scheme is the one the client used to reach us.
    const proxies = chain.length - 1;
    const proto = fromProxies(req.headers.get('x-forwarded-proto'), proxies)?.toLowerCase();
    headers.set('x-forwarded-proto', proto === 'http' || proto === 'https' ? proto : url.protocol.slice(0, -1));
    const claimed = trustForwardedHost ? fromProxies(req.headers.get('x-forwarded-host'), proxies) : undefined;
    const host = claimed && HOST.test(claimed) ? claimed : (req.headers.get('host') ?? url.host);
    if (host) headers.set('x-forwarded-host', host);

    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error('origin timeout')), timeoutMs);
    const hasBody = req.body !== null && length !== 0;
    const overLimit = new AbortController();
    // A declared length was checked against maxBodyBytes already, and the server holds the body to it:
    // that body goes as it is, so fetch keeps its Content-Length (workerd chunks any other stream).
    const body = !hasBody ? null : maxBodyBytes === undefined || length !== null ? req.body! : limited(req.body!, maxBodyBytes, (err) => overLimit.abort(err));
    const target = `${origin}${url.pathname}${url.search}`;
    const signal = AbortSignal.any([controller.signal, req.signal, overLimit.signal]);
    try {
      let res: Response;
      // With fetch the body goes as a stream in init; on Node that is not enough (fetch tees it anyway,
      // see the `fetch` option), which is why the Node and Lambda entries pass `send`.
      if (send) {
        res = await send(target, { method: req.method, headers, body, length: body ? length : 0, signal });
      } else {
        // fetch frames the body itself: with the length when it is given (workerd and undici send it
        // as Content-Length and hold the body to it), else chunked.
        if (body && length !== null) headers.set('content-length', String(length));
        res = await doFetch(target, { method: req.method, headers, body, redirect: 'manual', signal, ...(body ? { duplex: 'half' } : {}) } as RequestInit);
      }
      const out = endToEnd(res.headers);
      if (!passEncoding && out.has('content-encoding')) {
        // fetch has already decoded the body: the encoding and length no longer describe it.
        out.delete('content-encoding');
        out.delete('content-length');
      }
      // Otherwise the body goes out as the origin encoded it, with its Content-Encoding and Content-Length.
      // Inside the try: a status no Response may carry (a 101, a 600) is the origin failing, a 502.
      return new Response(res.body, { status: res.status, statusText: res.statusText, headers: out });
    } catch {
      if (overLimit.signal.reason instanceof RangeError) return tooLarge();
      if (controller.signal.aborted) {
        return problemResponse('gateway-timeout', `the origin did not answer within ${timeoutMs} ms`, {}, { 'Retry-After': '1' });
      }
      return problemResponse('bad-gateway', 'the origin could not be reached');
    } finally {
      // Only the wait for the response head is bounded: a long download is not cut off.
      clearTimeout(timer);
    }
  }
  return Object.assign(forward, { refuse });
}
