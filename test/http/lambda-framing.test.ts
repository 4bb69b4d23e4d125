// Request smuggling through the Lambda entry's gateway (issue 30, 1b): in every event kind, for every
// method the gateway forwards, a body that holds a whole HTTP request, with the client's framing headers
// chunked / Content-Length / both / none (and a Content-Length shorter or longer than the body), each with and without a Connection header naming them. The
// origin keeps its connections alive and logs every request it parses: each invocation must reach it as
// exactly one request (or none, when refused), and the next, unrelated invocation gets its own answer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KINDS, context, lambdaEvent, loadLambda, resultBytes, resultHeader, type LambdaHandler } from '../support/lambda-events.js';
import { startLoggingOrigin, type LoggingOrigin } from '../support/logging-origin.js';

const SMUGGLED = 'GET /smuggled-admin HTTP/1.1\r\nHost: origin\r\nX-API-KEY: never-limited\r\nX-Forwarded-For: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\n\r\n';
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];
const FRAMINGS: Record<string, [string, string][]> = {
  chunked: [['Transfer-Encoding', 'chunked']],
  'content-length': [['Content-Length', String(Buffer.byteLength(SMUGGLED))]],
  both: [['Content-Length', String(Buffer.byteLength(SMUGGLED))], ['Transfer-Encoding', 'chunked']],
  none: [],
  // A Content-Length that does not match the event's body: the body is what the event holds.
  'short content-length': [['Content-Length', '5']],
  'long content-length': [['Content-Length', '4096']],
};
const CONNECTION: Record<string, string> = {
  chunked: 'transfer-encoding',
  'content-length': 'content-length',
  both: 'content-length, transfer-encoding',
  none: 'content-length',
  'short content-length': 'content-length',
  'long content-length': 'content-length',
};

let origin: LoggingOrigin;
let handler: LambdaHandler;

beforeAll(async () => {
  // Answers each request it parses with `<method> <path> <body length>`.
  origin = await startLoggingOrigin();
  handler = await loadLambda({
    LIMITER_POLICIES: JSON.stringify({ gate: { capacity: 1_000_000, refillPerSecond: 1_000 } }),
    PERMIT_TOKENS: 'lambda-token',
    GATE_ORIGIN: origin.url,
    GATE_POLICY: 'gate',
    GATE_KEY: 'header:x-api-key',
  });
});

afterAll(() => origin.close());

describe('Lambda gateway framing: one invocation is one request at the origin', () => {
  for (const kind of KINDS) {
    it(`${kind}: every method × framing × Connection, then an unrelated GET`, async () => {
      const failures: string[] = [];
      for (const method of METHODS) {
        for (const [framing, headers] of Object.entries(FRAMINGS)) {
          for (const connection of [false, true]) {
            const label = `${method} ${framing}${connection ? ` Connection: ${CONNECTION[framing]}` : ''}`;
            origin.clear();
            const event = lambdaEvent(kind, {
              method,
              path: '/item',
              headers: [['X-API-KEY', 'abc'], ['Content-Type', 'text/plain'], ...headers, ...(connection ? [['Connection', CONNECTION[framing]!] as [string, string]] : [])],
              drop: ['authorization', 'connection'],
              body: SMUGGLED,
            });
            const first = await handler(event, context);
            const next = await handler(lambdaEvent(kind, { method: 'GET', path: '/next', headers: [['X-API-KEY', 'other-client']], drop: ['authorization', 'content-type'] }), context);
            await origin.settled();
            const seen = origin.requests.slice();
            if (origin.parseErrors.length > 0) failures.push(`${label}: the origin's parser failed on ${JSON.stringify(origin.parseErrors)}`);
            if (method === 'GET' || method === 'HEAD' || framing === 'both') {
              // A GET or HEAD cannot carry a body, and both framing fields are refused as the Node
              // server refuses them (review 6, F8): nothing reaches the origin.
              if (first.statusCode !== 400 || resultHeader(first, 'content-type') !== 'application/problem+json') failures.push(`${label}: answered ${first.statusCode} ${resultBytes(first).toString().slice(0, 80)}`);
              if (seen.length !== 1 || seen[0]!.path !== '/next') failures.push(`${label}: origin parsed ${seen.map((p) => `${p.method} ${p.path}`).join(' | ')}`);
            } else {
              const [one, two] = seen;
              if (seen.length !== 2 || one!.method !== method || one!.path !== '/item' || two!.path !== '/next') {
                failures.push(`${label}: origin parsed ${seen.map((p) => `${p.method} ${p.path}`).join(' | ')}`);
              } else if (!one!.body.equals(Buffer.from(SMUGGLED))) {
                failures.push(`${label}: origin got the body ${JSON.stringify(one!.body.toString())}`);
              }
              if (first.statusCode !== 200 || resultBytes(first).toString() !== `${method} /item ${Buffer.byteLength(SMUGGLED)}`) failures.push(`${label}: answered ${first.statusCode} ${resultBytes(first).toString()}`);
            }
            // The unrelated invocation gets its own answer, never one left on the connection.
            if (next.statusCode !== 200 || resultBytes(next).toString() !== 'GET /next 0') failures.push(`${label}: the next invocation got ${next.statusCode} ${resultBytes(next).toString()}`);
          }
        }
      }
      expect(failures).toEqual([]);
    });
  }
});
