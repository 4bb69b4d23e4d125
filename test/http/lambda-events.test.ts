// The Lambda entry's own adapter against handcrafted events of every kind (issue 30, items 2, 3 and 5):
// the scheme forwarded per event source, Host checked before it can touch the URL, one Host only,
// request headers joined as HTTP joins them and passed on as their bytes, control characters and bad
// base64 refused before the limiter, and the origin's response bytes and Set-Cookie headers kept.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServerResponse } from 'node:http';
import { gzipSync } from 'node:zlib';
import { KINDS, context, lambdaEvent, loadLambda, resultBytes, resultCookies, resultHeader, type Kind, type LambdaHandler, type LambdaResult } from '../support/lambda-events.js';
import { startLoggingOrigin, type LoggedRequest, type LoggingOrigin } from '../support/logging-origin.js';

const LATIN1 = Buffer.from('café à!', 'latin1'); // 7 bytes, not UTF-8
const JSON_BOM = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"ok":"ünïcode ☕"}')]);
const GZIPPED = gzipSync('hello '.repeat(50));
const COOKIES = ['a=1; Path=/; HttpOnly', 'b=2; Path=/; Secure', 'c=3; Max-Age=60'];

let origin: LoggingOrigin;
let seen: LoggedRequest[];
let originUrl: string;

function answer(req: LoggedRequest, res: ServerResponse): void {
  switch (req.path) {
    case '/latin1':
      res.writeHead(200, { 'Content-Type': 'text/plain; charset=iso-8859-1', 'Content-Length': LATIN1.length });
      return void res.end(LATIN1);
    case '/bom':
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': JSON_BOM.length });
      return void res.end(JSON_BOM);
    case '/gzip':
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Encoding': 'gzip', 'Content-Length': GZIPPED.length });
      return void res.end(GZIPPED);
    case '/cookies':
      // Raw header lines: three Set-Cookie, two X-Multi, one value in UTF-8 bytes.
      res.writeHead(200, ['Set-Cookie', COOKIES[0]!, 'Set-Cookie', COOKIES[1]!, 'Set-Cookie', COOKIES[2]!, 'X-Multi', 'a', 'X-Multi', 'b', 'X-City', Buffer.from('Srīperumbūdūr').toString('latin1'), 'Content-Type', 'text/plain']);
      return void res.end('cookies');
    default:
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end(`${req.method} ${req.path}`);
  }
}

beforeAll(async () => {
  origin = await startLoggingOrigin({ respond: answer });
  seen = origin.requests;
  originUrl = origin.url;
});

afterAll(() => origin.close());

/** Gateway mode, keyed by X-API-KEY, one request per key and never refilled within a test. */
const gatewayEnv = (extra: Record<string, string> = {}) => ({
  LIMITER_POLICIES: JSON.stringify({ gate: { capacity: 1, refillPerSecond: 0.0001 }, api: { capacity: 5, refillPerSecond: 0.0001 } }),
  PERMIT_TOKENS: 'lambda-token',
  GATE_ORIGIN: originUrl,
  GATE_POLICY: 'gate',
  GATE_KEY: 'header:x-api-key',
  ...extra,
});

let keys = 0;
const freshKey = () => `key-${++keys}`;

/** A gateway GET of `path` with a fresh X-API-KEY (so it is never refused for its bucket). */
function gatewayGet(kind: Kind, path: string, headers: [string, string][] = [], key = freshKey()) {
  return lambdaEvent(kind, { method: 'GET', path, headers: [['X-API-KEY', key], ...headers], drop: ['authorization', 'content-type'] });
}

function expectProblem(res: LambdaResult, status: number, type: string, label: string): void {
  expect(res.statusCode, label).toBe(status);
  expect(resultHeader(res, 'content-type'), label).toBe('application/problem+json');
  expect(JSON.parse(resultBytes(res).toString()), label).toMatchObject({ type: `urn:edge-limiter:problem:${type}`, status });
}

/** The request the origin saw last, if it arrived after `before` entries. */
const lastSeen = (before: number) => (seen.length > before ? seen.at(-1) : undefined);

/** A header's bytes as the origin received them (Node's parser reads one character per byte). */
const rawHeaderBytes = (s: LoggedRequest, name: string) => {
  const i = s.rawHeaders.findIndex((h, j) => j % 2 === 0 && h.toLowerCase() === name);
  return i < 0 ? undefined : Buffer.from(s.rawHeaders[i + 1]!, 'latin1');
};

describe('X-Forwarded-Proto from what the event source says', () => {
  let handler: LambdaHandler;
  let trusting: LambdaHandler;
  beforeAll(async () => {
    trusting = await loadLambda(gatewayEnv({ GATE_TRUSTED_PROXIES: '10.0.0.0/8' }));
    handler = await loadLambda(gatewayEnv());
  });

  it('API Gateway and Function URLs serve only HTTPS: https', async () => {
    for (const kind of ['apigw-v1', 'apigw-v2', 'function-url'] as const) {
      const before = seen.length;
      expect((await handler(gatewayGet(kind, '/proto'), context)).statusCode, kind).toBe(200);
      expect(lastSeen(before)?.headers['x-forwarded-proto'], kind).toBe('https');
    }
  });

  it('ALB: the listener’s protocol, http from an HTTP listener, with or without GATE_TRUSTED_PROXIES', async () => {
    for (const kind of ['alb', 'alb-multi'] as const) {
      for (const proto of ['http', 'https']) {
        for (const [name, h] of [['untrusted', handler], ['trusting', trusting]] as const) {
          // As the ALB writes them: its listener's protocol and port, the client's address appended.
          const headers: [string, string][] = [['x-forwarded-proto', proto], ['x-forwarded-port', proto === 'http' ? '80' : '443']];
          const before = seen.length;
          expect((await h(gatewayGet(kind, '/proto', headers), context)).statusCode).toBe(200);
          expect(lastSeen(before)?.headers['x-forwarded-proto'], `${kind} ${proto} ${name}`).toBe(proto);
          // Through a trusted proxy of ours in front of the ALB (its X-Forwarded-For hop is believed).
          const viaProxy = gatewayGet(kind, '/proto', [...headers, ['x-forwarded-for', '198.51.100.9, 10.1.2.3']]);
          const before2 = seen.length;
          expect((await h(viaProxy, context)).statusCode).toBe(200);
          expect(lastSeen(before2)?.headers['x-forwarded-proto'], `${kind} ${proto} ${name} via a proxy`).toBe(proto);
        }
      }
    }
  });
});

describe('the client', () => {
  it('the origin learns the event source’s client address (X-Forwarded-For, X-Real-IP), never the client’s claim', async () => {
    const handler = await loadLambda(gatewayEnv());
    const expected: Record<Kind, string> = { 'apigw-v1': '203.0.113.10', 'apigw-v2': '198.51.100.7', 'function-url': '192.0.2.44', alb: '72.12.164.125', 'alb-multi': '72.12.164.125' };
    for (const kind of KINDS) {
      const before = seen.length;
      expect((await handler(gatewayGet(kind, '/who', [['X-Real-IP', '6.6.6.6']]), context)).statusCode).toBe(200);
      expect(lastSeen(before)?.headers['x-forwarded-for'], kind).toBe(expected[kind]);
      expect(lastSeen(before)?.headers['x-real-ip'], kind).toBe(expected[kind]);
    }
  });
});

describe('Host', () => {
  let handler: LambdaHandler;
  beforeAll(async () => {
    handler = await loadLambda(gatewayEnv());
  });

  it('a Host that is not a host name or address (with an optional port) is refused 400 in every kind; the path is the event’s', async () => {
    for (const kind of KINDS) {
      for (const host of ['x/admin?', 'x/v1/permits?', 'x?a=', 'x#', 'x y', 'user@x', 'x\\y', 'x:port', 'x:99999', '[::::]', '[2001:db8::1']) {
        const before = seen.length;
        const key = freshKey();
        const res = await handler(gatewayGet(kind, '/public/page', [['Host', host]], key), context);
        expectProblem(res, 400, 'invalid-request', `${kind} Host ${host}`);
        expect(seen.length, `${kind} Host ${host} reached the origin`).toBe(before);
        // Refused before the limiter: the key's one request is still there.
        expect((await handler(gatewayGet(kind, '/public/page', [], key), context)).statusCode, `${kind} Host ${host} charged`).toBe(200);
      }
      for (const host of ['gw.example', 'gw.example:8443', '192.0.2.1:80', '[2001:db8::1]:443']) {
        const before = seen.length;
        const res = await handler(gatewayGet(kind, '/public/page', [['Host', host]]), context);
        expect(res.statusCode, `${kind} Host ${host}`).toBe(200);
        expect(lastSeen(before)?.path, `${kind} Host ${host}`).toBe('/public/page');
        expect(lastSeen(before)?.headers['x-forwarded-host'], `${kind} Host ${host}`).toBe(host);
      }
    }
  });

  it('the forwarded target is the event’s path and query: a "?" or "#" in a decoded path stays in the path', async () => {
    for (const kind of KINDS) {
      const before = seen.length;
      const event = lambdaEvent(kind, { method: 'GET', path: '/a?b#c', query: [['q', '1 2'], ['r', 'x&y']], headers: [['X-API-KEY', freshKey()]], drop: ['authorization', 'content-type'] });
      expect((await handler(event, context)).statusCode, kind).toBe(200);
      expect(lastSeen(before)?.path, kind).toBe(kind === 'apigw-v2' || kind === 'function-url' ? '/a%3Fb%23c?q=1+2&r=x%26y' : '/a%3Fb%23c?q=1%202&r=x%26y');
    }
  });

  it('a "%" that starts no escape is forwarded as %25 (no invalid target at the origin); a "%XX" goes as it is (review 6, F10)', async () => {
    for (const kind of KINDS) {
      for (const [path, forwarded] of [['/100%/x', '/100%25/x'], ['/p/%zz%4', '/p/%25zz%254'], ['/p/%41%2e', '/p/%41%2e']]) {
        const before = seen.length;
        const event = lambdaEvent(kind, { method: 'GET', path: path!, headers: [['X-API-KEY', freshKey()]], drop: ['authorization', 'content-type'] });
        expect((await handler(event, context)).statusCode, `${kind} ${path}`).toBe(200);
        expect(lastSeen(before)?.path, `${kind} ${path}`).toBe(forwarded);
      }
    }
  });

  it('two Host values (REST API, multi-value ALB, HTTP API’s joined list) or an empty Host: 400 before any route and the limiter', async () => {
    const cases: [Kind, [string, string][]][] = [
      ['apigw-v1', [['Host', 'a.example'], ['Host', 'b.example']]],
      ['apigw-v1', [['Host', 'a.example'], ['Host', 'a.example']]],
      ['apigw-v1', [['Host', 'a.example'], ['host', 'b.example']]],
      ['alb-multi', [['host', 'a.example'], ['host', 'b.example']]],
      ['alb-multi', [['host', 'a.example'], ['host', 'a.example']]],
      // HTTP API and Function URLs join repeated fields with "," (a single-value ALB keeps only the last).
      ['apigw-v2', [['host', 'a.example'], ['host', 'b.example']]],
      ['function-url', [['host', 'a.example'], ['host', 'a.example']]],
      ...KINDS.map((k) => [k, [['Host', '']]] as [Kind, [string, string][]]),
    ];
    for (const [kind, hosts] of cases) {
      const label = `${kind} ${JSON.stringify(hosts)}`;
      for (const path of ['/public/page', '/healthz', '/v1/openapi.json']) {
        const key = freshKey();
        const before = seen.length;
        expectProblem(await handler(gatewayGet(kind, path, hosts, key), context), 400, 'invalid-request', `${label} ${path}`);
        expect(seen.length, label).toBe(before);
        if (path === '/public/page') expect((await handler(gatewayGet(kind, path, [], key), context)).statusCode, `${label} charged`).toBe(200);
      }
    }
  });
});

describe('request headers and bodies', () => {
  let handler: LambdaHandler;
  beforeAll(async () => {
    handler = await loadLambda(gatewayEnv());
  });

  it('repeated request headers are joined with ", " (Cookie with "; "), in a REST API and a multi-value ALB', async () => {
    for (const kind of ['apigw-v1', 'alb-multi'] as const) {
      const before = seen.length;
      const event = gatewayGet(kind, '/joined', [['Accept', 'text/html'], ['Accept', 'application/json'], ['Cookie', 'a=1'], ['Cookie', 'b=2']]);
      expect((await handler(event, context)).statusCode, kind).toBe(200);
      expect(lastSeen(before)?.headers.accept, kind).toBe('text/html, application/json');
      expect(lastSeen(before)?.headers.cookie, kind).toBe('a=1; b=2');
    }
    // HTTP API hands cookies over in `cookies`: one Cookie header again.
    for (const kind of ['apigw-v2', 'function-url'] as const) {
      const before = seen.length;
      expect((await handler(gatewayGet(kind, '/joined', [['Cookie', 'a=1; b=2']]), context)).statusCode).toBe(200);
      expect(lastSeen(before)?.headers.cookie, kind).toBe('a=1; b=2');
    }
  });

  it('non-ASCII header values reach the origin as their UTF-8 bytes, not percent-encoded', async () => {
    for (const kind of KINDS) {
      for (const value of ['café', 'Srīperumbūdūr ☕']) {
        const before = seen.length;
        expect((await handler(gatewayGet(kind, '/utf8', [['X-City', value]]), context)).statusCode, kind).toBe(200);
        expect(rawHeaderBytes(lastSeen(before)!, 'x-city')?.toString('hex'), `${kind} ${value}`).toBe(Buffer.from(value).toString('hex'));
      }
    }
  });

  it('a control character in a header value: 400 problem+json before the limiter charges, in every kind', async () => {
    for (const kind of KINDS) {
      for (const value of ['a\x01b', 'a\x7fb', 'a\x00b', 'a\x1bb']) {
        const key = freshKey();
        const before = seen.length;
        const res = await handler(gatewayGet(kind, '/ctl', [['X-Note', value]], key), context);
        expectProblem(res, 400, 'invalid-request', `${kind} ${JSON.stringify(value)}`);
        expect(seen.length).toBe(before);
        expect((await handler(gatewayGet(kind, '/ctl', [], key), context)).statusCode, `${kind} ${JSON.stringify(value)} charged`).toBe(200);
      }
      // A tab is allowed in a field value.
      expect((await handler(gatewayGet(kind, '/ctl', [['X-Note', 'a\tb']]), context)).statusCode).toBe(200);
    }
  });

  it('a Transfer-Encoding other than chunked alone: 501 (400 when chunked is not last, is there twice or beside a Content-Length) before the limiter, as on Node', async () => {
    const cases: [[string, string][], number, string][] = [
      [[['Transfer-Encoding', 'gzip, chunked']], 501, 'transfer-coding-not-implemented'],
      // Review 6, F8: these two were 501 and forwarded (re-framed); Node's parser answers them 400.
      [[['Transfer-Encoding', 'chunked, chunked']], 400, 'invalid-request'],
      [[['Transfer-Encoding', 'chunked'], ['Transfer-Encoding', 'chunked']], 400, 'invalid-request'],
      [[['Content-Length', '3'], ['Transfer-Encoding', 'chunked']], 400, 'invalid-request'],
      [[['Transfer-Encoding', 'gzip'], ['Transfer-Encoding', 'chunked']], 501, 'transfer-coding-not-implemented'],
      [[['Transfer-Encoding', 'gzip']], 400, 'invalid-request'],
      [[['Transfer-Encoding', 'chunked, identity']], 400, 'invalid-request'],
    ];
    for (const kind of KINDS) {
      for (const [te, status, type] of cases) {
        // A single-value ALB keeps only the last line.
        if (kind === 'alb' && new Set(te.map(([name]) => name)).size < te.length) continue;
        const key = freshKey();
        const before = seen.length;
        const event = lambdaEvent(kind, { method: 'POST', path: '/upload', headers: [['X-API-KEY', key], ...te], drop: ['authorization'], body: gzipSync('abc') });
        expectProblem(await handler(event, context), status, type, `${kind} ${JSON.stringify(te)}`);
        expect(seen.length).toBe(before);
        expect((await handler(gatewayGet(kind, '/te', [], key), context)).statusCode, `${kind} ${JSON.stringify(te)} charged`).toBe(200);
      }
    }
  });

  it('events of a known kind in a shape AWS would not send get 400 problem+json, never a crash', async () => {
    const v1 = lambdaEvent('apigw-v1', { method: 'GET', path: '/x' });
    const albMulti = lambdaEvent('alb-multi', { method: 'GET', path: '/x' });
    const v2 = lambdaEvent('apigw-v2', { method: 'GET', path: '/x' });
    const cases: [string, Record<string, unknown>][] = [
      ['v1 without a path', { ...v1, path: undefined }],
      ['v1 with a relative path', { ...v1, path: 'x' }],
      ['v1 with a method that is no token', { ...v1, httpMethod: 'GE T' }],
      ['v1 with no headers and no domain name', { ...v1, headers: null, multiValueHeaders: null, requestContext: { ...v1.requestContext, domainName: undefined } }],
      ['ALB with a header value that is no list', { ...albMulti, multiValueHeaders: { host: 'x.example' } }],
      ['v2 with a header name that is no token', { ...v2, headers: { ...v2.headers, 'x bad': '1' } }],
      ['v2 without a method', { ...v2, requestContext: { ...v2.requestContext, http: { ...v2.requestContext.http, method: undefined } } }],
    ];
    for (const [label, event] of cases) expectProblem(await handler(event, context), 400, 'invalid-request', label);
  });

  it('isBase64Encoded with a body that is not base64: 400 problem+json, not a plain-text 500, before the limiter', async () => {
    for (const kind of KINDS) {
      for (const raw of ['not base64!', 'abc', 'YW Jj', 'YWJj=']) {
        const key = freshKey();
        const before = seen.length;
        const event = lambdaEvent(kind, { method: 'POST', path: '/upload', headers: [['X-API-KEY', key]], drop: ['authorization'], rawBase64Body: raw });
        expectProblem(await handler(event, context), 400, 'invalid-request', `${kind} ${JSON.stringify(raw)}`);
        expect(seen.length).toBe(before);
        // The permit API too.
        expectProblem(await handler(lambdaEvent(kind, { rawBase64Body: raw }), context), 400, 'invalid-request', `${kind} permit ${JSON.stringify(raw)}`);
      }
      // Valid base64 still goes through as its bytes.
      const before = seen.length;
      const bytes = new Uint8Array([0, 1, 2, 0xfe, 0xff]);
      expect((await handler(lambdaEvent(kind, { method: 'PUT', path: '/upload', headers: [['X-API-KEY', freshKey()]], drop: ['authorization'], body: bytes }), context)).statusCode).toBe(200);
      expect(lastSeen(before)?.body.toString('hex')).toBe('000102feff');
      expect(lastSeen(before)?.headers['content-length']).toBe('5');
    }
  });
});

describe('the origin’s response reaches the client unchanged', () => {
  let handler: LambdaHandler;
  beforeAll(async () => {
    handler = await loadLambda(gatewayEnv());
  });

  it('body bytes: not UTF-8 in base64, UTF-8 as text (a BOM kept), encoded bodies byte for byte', async () => {
    for (const kind of KINDS) {
      const latin1 = await handler(gatewayGet(kind, '/latin1'), context);
      expect(latin1.isBase64Encoded, kind).toBe(true);
      expect(resultBytes(latin1).toString('hex'), kind).toBe(LATIN1.toString('hex'));
      expect(resultHeader(latin1, 'content-length'), kind).toBe('7');
      const bom = await handler(gatewayGet(kind, '/bom'), context);
      // Text where it is UTF-8: a REST API without binaryMediaTypes passes it on as it is.
      expect(bom.isBase64Encoded, kind).toBe(false);
      expect(resultBytes(bom).toString('hex'), kind).toBe(JSON_BOM.toString('hex'));
      const gz = await handler(gatewayGet(kind, '/gzip', [['Accept-Encoding', 'gzip']]), context);
      expect(resultBytes(gz).toString('hex'), kind).toBe(GZIPPED.toString('hex'));
      expect(resultHeader(gz, 'content-encoding'), kind).toBe('gzip');
    }
  });

  it('every Set-Cookie reaches the client in every kind (an ALB without multi-value headers too); other repeats joined with ", "', async () => {
    for (const kind of KINDS) {
      const res = await handler(gatewayGet(kind, '/cookies'), context);
      expect(res.statusCode, kind).toBe(200);
      expect(resultCookies(res).sort(), kind).toEqual([...COOKIES].sort());
      expect(resultHeader(res, 'x-multi'), kind).toBe('a, b');
      if (kind === 'alb') {
        // One key per cookie in `headers`, each a different spelling of set-cookie.
        const names = Object.keys(res.headers!).filter((k) => k.toLowerCase() === 'set-cookie');
        expect(new Set(names).size, kind).toBe(3);
      }
      // HTTP API and REST API results carry no field their source does not know.
      if (kind === 'apigw-v1' || kind.startsWith('alb')) expect(res.cookies, kind).toBeUndefined();
    }
  });

  it('a response header value in UTF-8 bytes goes into the result as that text (AWS writes the result as UTF-8)', async () => {
    for (const kind of KINDS) expect(resultHeader(await handler(gatewayGet(kind, '/cookies'), context), 'x-city'), kind).toBe('Srīperumbūdūr');
  });

  it('CONNECT, TRACE and TRACK: 501 problem+json in each kind’s shape, reaching no origin', async () => {
    const before = seen.length;
    for (const kind of KINDS) {
      for (const method of ['CONNECT', 'TRACE', 'TRACK', 'trace']) {
        const res = await handler(lambdaEvent(kind, { method, path: '/x', drop: ['authorization'] }), context);
        expectProblem(res, 501, 'method-not-implemented', `${kind} ${method}`);
        expect(res.multiValueHeaders !== undefined, kind).toBe(kind === 'apigw-v1' || kind === 'alb-multi');
      }
    }
    expect(seen.length).toBe(before);
  });
});
