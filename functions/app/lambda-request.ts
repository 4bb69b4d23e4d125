// The Lambda entry's own event → Request step, for the four HTTP event kinds: API Gateway REST (v1),
// HTTP API (v2), Function URL (v2's shape) and ALB (with or without multi-value headers). An event
// that no server would accept as a request is refused here, with problem+json, before the app runs.
import type { ALBEvent, APIGatewayProxyEvent, APIGatewayProxyEventV2 } from 'aws-lambda';
import { problemResponse } from '../../src/http/problem.js';
import { CONTROL, HOST } from '../../src/http/fields.js';

export type LambdaHttpEvent = APIGatewayProxyEvent | APIGatewayProxyEventV2 | ALBEvent;

/** Which result shape the event's source reads back (see lambda-result.ts). */
export type EventKind = 'v1' | 'v2' | 'alb' | 'alb-multi';

export function eventKind(event: LambdaHttpEvent): EventKind {
  const rc = typeof event === 'object' && event !== null ? (event as { requestContext?: unknown }).requestContext : undefined;
  if (typeof rc === 'object' && rc !== null && 'elb' in rc) return (event as ALBEvent).multiValueHeaders ? 'alb-multi' : 'alb';
  if (typeof rc === 'object' && rc !== null && 'http' in rc) return 'v2';
  if (typeof (event as APIGatewayProxyEvent | null)?.httpMethod === 'string') return 'v1';
  // Not an HTTP event: there is no response shape to answer in, so the invocation fails.
  throw new TypeError('[edge-limiter] [lambda] not an API Gateway, Function URL or ALB event');
}

export function eventMethod(event: LambdaHttpEvent, kind: EventKind): string {
  const method = kind === 'v2' ? (event as APIGatewayProxyEventV2).requestContext.http.method : (event as ALBEvent).httpMethod;
  return typeof method === 'string' ? method : '';
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
// Standard base64 as API Gateway and ALB write it: padded, no whitespace.
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
// The client's framing describes its connection to AWS, not this body: the body is framed again below.
const FRAMING = new Set(['content-length', 'transfer-encoding']);

const invalid = (detail: string) => ({ refusal: problemResponse('invalid-request', detail) });

/**
 * The event's header fields by lower-case name, every value the source kept (a REST API's and a
 * multi-value ALB's repeated fields, one entry per line; HTTP API has already joined them with commas;
 * a single-value ALB kept only the last line).
 */
function fieldsOf(event: LambdaHttpEvent, kind: EventKind): Map<string, string[]> {
  const fields = new Map<string, string[]>();
  const add = (name: string, value: unknown) => {
    if (typeof value !== 'string') return;
    const key = name.toLowerCase();
    const list = fields.get(key);
    if (list) list.push(value);
    else fields.set(key, [value]);
  };
  const multi = (event as APIGatewayProxyEvent).multiValueHeaders;
  const single = (event as APIGatewayProxyEvent).headers;
  if ((kind === 'v1' || kind === 'alb-multi') && multi) {
    for (const [name, values] of Object.entries(multi)) if (Array.isArray(values)) for (const v of values) add(name, v);
    // A REST API repeats each field in `headers` (its last value); add only what multiValueHeaders lacks.
    if (kind === 'v1' && single) for (const [name, v] of Object.entries(single)) if (!fields.has(name.toLowerCase())) add(name, v);
  } else if (single) {
    for (const [name, v] of Object.entries(single)) add(name, v);
  }
  // HTTP API and Function URLs move Cookie lines out of the headers into `cookies`.
  const cookies = kind === 'v2' ? (event as APIGatewayProxyEventV2).cookies : undefined;
  if (Array.isArray(cookies)) for (const c of cookies) add('cookie', c);
  return fields;
}

/**
 * AWS decodes a header's bytes as UTF-8 into the event's JSON. A Headers value is a byte string (one
 * character per byte, as Node's HTTP parser reads them), so the value goes back to its UTF-8 bytes:
 * the origin receives what the client sent, not a percent-encoded or mangled copy.
 */
function asBytes(value: string): string {
  return /[^\x00-\x7f]/.test(value) ? Buffer.from(value, 'utf8').toString('latin1') : value;
}

function queryOf(event: LambdaHttpEvent, kind: EventKind): string {
  if (kind === 'v2') return (event as APIGatewayProxyEventV2).rawQueryString ?? '';
  const e = event as ALBEvent;
  // API Gateway REST decodes the parameters, so they are encoded again; an ALB passes them as the client
  // wrote them (its documentation: "the load balancer does not decode them"), so they go as they are.
  const encode = kind === 'v1' ? encodeURIComponent : (s: string) => s;
  const pairs: string[] = [];
  if (e.multiValueQueryStringParameters) {
    for (const [k, values] of Object.entries(e.multiValueQueryStringParameters)) {
      if (Array.isArray(values)) for (const v of values) if (typeof v === 'string') pairs.push(`${encode(k)}=${encode(v)}`);
    }
  } else if (e.queryStringParameters) {
    for (const [k, v] of Object.entries(e.queryStringParameters)) if (typeof v === 'string') pairs.push(`${encode(k)}=${encode(v)}`);
  }
  return pairs.join('&');
}

/**
 * The scheme the client used. API Gateway and Function URLs serve only HTTPS. An ALB says which of its
 * listeners took the request in X-Forwarded-Proto (the right-most entry is its own); anything else
 * there is not trusted to mean https.
 */
function schemeOf(kind: EventKind, fields: Map<string, string[]>): 'http' | 'https' {
  if (kind === 'v1' || kind === 'v2') return 'https';
  const proto = fields.get('x-forwarded-proto')?.at(-1)?.split(',').at(-1)?.trim().toLowerCase();
  return proto === 'https' ? 'https' : 'http';
}

function bodyOf(event: LambdaHttpEvent): Uint8Array<ArrayBuffer> | undefined | { refusal: Response } {
  const body = (event as ALBEvent).body;
  if (typeof body !== 'string') return undefined;
  if (!event.isBase64Encoded) return new Uint8Array(Buffer.from(body, 'utf8'));
  if (!BASE64.test(body)) return invalid('the event says its body is base64, but it is not valid base64');
  return new Uint8Array(Buffer.from(body, 'base64'));
}

/**
 * A Transfer-Encoding other than `chunked` alone is refused as the Node server refuses it (RFC 9112
 * §6.1): AWS has undone the chunking, but a coding such as gzip would reach the origin as raw bytes
 * with nothing to say so. `chunked` more than once, or beside a Content-Length, is a 400, as Node's
 * parser answers it (RFC 9112 §6.3 lets a server refuse both fields; the gateway does).
 */
function transferCodingRefusal(fields: Map<string, string[]>): { refusal: Response } | undefined {
  const values = fields.get('transfer-encoding');
  if (!values) return undefined;
  if (fields.has('content-length')) return invalid('the request has both Content-Length and Transfer-Encoding');
  const codings = values.join(',').split(',').map((c) => c.trim().toLowerCase());
  if (codings.length === 1 && codings[0] === 'chunked') return undefined;
  const named = JSON.stringify(values.join(', ').slice(0, 64));
  if (codings.at(-1) !== 'chunked') return invalid(`the body's length cannot be known: chunked is not the last of the transfer codings ${named}`);
  if (codings.indexOf('chunked') < codings.length - 1) return invalid(`chunked is applied more than once in the transfer codings ${named}`);
  return { refusal: problemResponse('transfer-coding-not-implemented', `this server applies no transfer coding but chunked, once; got ${named}`) };
}

/**
 * The Request the app serves for this event, or the problem+json refusal of an event that is not a
 * valid request: an invalid method, header name or value (a control character), a transfer coding
 * other than chunked, a Host that is empty, repeated or not a host, a body that is not the base64 it
 * claims, or a GET or HEAD with a body.
 * The Request's URL is built from the event's path alone (the Host cannot add to it), its body is the
 * event's decoded bytes and its Content-Length their count: no framing header of the client's is kept.
 */
export function toRequest(event: LambdaHttpEvent, kind: EventKind): { request: Request } | { refusal: Response } {
  const method = eventMethod(event, kind);
  if (!TOKEN.test(method)) return invalid('the request method is not a valid token');
  const fields = fieldsOf(event, kind);
  for (const [name, values] of fields) {
    if (!TOKEN.test(name)) return invalid('a header name is not a valid token');
    if (values.some((v) => CONTROL.test(v))) return invalid(`the ${name} header holds a control character`);
  }
  const coding = transferCodingRefusal(fields);
  if (coding) return coding;

  const hosts = fields.get('host');
  if (hosts && hosts.length > 1) return invalid('the request has more than one Host header');
  const domainName = kind === 'v2' || kind === 'v1' ? (event as APIGatewayProxyEventV2).requestContext?.domainName : undefined;
  const host = hosts ? hosts[0]!.trim() : typeof domainName === 'string' ? domainName : undefined;
  if (!host) return invalid('the request has no Host header');
  if (!HOST.test(host)) return invalid('the Host header is not a host name or address with an optional port');

  const path = kind === 'v2' ? (event as APIGatewayProxyEventV2).rawPath : (event as ALBEvent).path;
  if (typeof path !== 'string' || !path.startsWith('/')) return invalid('the request path does not start with "/"');
  let url: URL;
  try {
    url = new URL(`${schemeOf(kind, fields)}://${host}`);
  } catch {
    return invalid('the Host header is not a valid host'); // a port over 65535, an IPv6 literal that is not one
  }
  // The setters percent-encode what would end the path or the query ("?" and "#" in a decoded path).
  // A "%" that starts no escape is one only a decoded path holds, and no valid target: it is encoded
  // (review 6, F10). A "%XX" is left as it is: which AWS sources decode the path is not settled here.
  url.pathname = path.replace(/%(?![0-9A-Fa-f]{2})/g, '%25');
  url.search = queryOf(event, kind);

  const body = bodyOf(event);
  if (body && 'refusal' in body) return body;
  const bodyless = /^(?:GET|HEAD)$/i.test(method);
  if (bodyless && body && body.byteLength > 0) return invalid(`a ${method.toUpperCase()} request cannot carry a body`);

  const headers = new Headers();
  for (const [name, values] of fields) {
    if (FRAMING.has(name)) continue;
    let value = values.join(name === 'cookie' ? '; ' : ', ');
    // A Connection header naming a framing field would have the gateway drop the framing set here.
    if (name === 'connection') {
      value = value.split(',').filter((t) => !FRAMING.has(t.trim().toLowerCase())).join(',');
      if (value.trim() === '') continue;
    }
    headers.set(name, asBytes(name === 'host' ? host : value));
  }
  if (body && !bodyless) headers.set('content-length', String(body.byteLength));
  try {
    return { request: new Request(url, { method, headers, ...(body && !bodyless ? { body } : {}) }) };
  } catch {
    // e.g. a method fetch forbids that the handler did not answer itself
    return invalid('the request cannot be represented');
  }
}
