// The permit API's contract as an OpenAPI 3.1 document, served at GET /v1/openapi.json (public: it
// names no configured policy) and kept in the repository as openapi.json for client generators.
// test/http/openapi.test.ts holds it to the server: every route on one side exists on the other, every
// request field the server reads is described, every response the contract tests receive validates
// against its schema (additionalProperties: false, so a field the server adds and the document lacks
// fails), and every documented response field is seen in a real response. The linter runs there too.
import { MAX_IDEMPOTENCY_KEY_BYTES } from '../core/key.js';
import { MAX_BODY_BYTES } from './body.js';
import { SCHEMAS } from './openapi-schemas.js';
import { withLimits } from './openapi-limits.js';
import { PROBLEMS, problemType, type ProblemType } from './problem.js';
import { ROUTE_RIGHTS, type Route } from './auth.js';

/**
 * The response headers, inlined where used (a generator such as openapi-typescript types a header
 * reached through $ref as always present; most of these are not).
 */
const HEADERS = {
  RateLimit: {
    description: 'draft-ietf-httpapi-ratelimit-headers-11: per limit, `"<name>";r=<remaining>;t=<seconds until full>` (a policy of several limits lists each as `"<policy>.<limit>"`). Absent when the store did not answer.',
    schema: { type: 'string' },
  },
  'RateLimit-Policy': {
    description: 'draft-ietf-httpapi-ratelimit-headers-11: per limit, `"<name>";q=<capacity>;w=<seconds to refill from empty>`.',
    required: true,
    schema: { type: 'string' },
  },
  'Retry-After': { description: 'RFC 9110: whole seconds until a retry can pass (at least 1).', required: true, schema: { type: 'string', pattern: '^[0-9]+$' } },
  'X-RateLimit-Limit': { description: 'The most constraining limit\'s capacity.', required: true, schema: { type: 'string' } },
  'X-RateLimit-Remaining': { description: 'Its tokens left (absent when the store did not answer).', schema: { type: 'string' } },
  'X-RateLimit-Reset': { description: 'Seconds until it is full again (absent when the store did not answer).', schema: { type: 'string' } },
  'X-RateLimit-Reason': { description: 'Present when the bucket in the store did not decide alone: `store_error`, `deny_cache`, `lease`, `local` or `blocked`.', schema: { type: 'string' } },
  'WWW-Authenticate': { description: '`Bearer`.', required: true, schema: { type: 'string' } },
  'Cache-Control': { description: 'How the answer may be cached.', required: true, schema: { type: 'string' } },
} as const;

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const header = (name: keyof typeof HEADERS) => HEADERS[name];
const json = (schema: object) => ({ 'application/json': { schema } });

/**
 * A problem response: the `type`s this status can carry on this route, in its schema too (so a
 * generated client and the contract test both know them), and its `status` when the response has one.
 */
function problem(status: number | undefined, description: string, types: ProblemType[], headers: Record<string, object> = {}) {
  for (const t of types) if (status !== undefined && PROBLEMS[t].status !== status) throw new Error(`openapi: ${t} is not a ${status}`);
  const narrowed = { type: { enum: types.map(problemType) }, ...(status === undefined ? {} : { status: { const: status } }) };
  return {
    description: `${description} Problem types: ${types.map((t) => `\`${problemType(t)}\``).join(', ')}.`,
    ...(Object.keys(headers).length ? { headers } : {}),
    content: { 'application/problem+json': { schema: { allOf: [ref('Problem')], properties: narrowed } } },
  };
}

const unauthorized = problem(401, 'No or a wrong bearer token (or none configured on the server).', ['unauthorized'], { 'WWW-Authenticate': header('WWW-Authenticate') });
const forbidden = problem(403, 'The token lacks the right this request needs (`right` names it), or may not use its policy (`policy`): nothing was read or changed.', ['forbidden']);
/** The right a route needs (auth.ts's table), as `x-required-right` and the 403 that refuses a token without it. */
const needs = (...routes: Route[]) => ({ 'x-required-right': routes.length === 1 ? ROUTE_RIGHTS[routes[0]!] : routes.map((r) => ROUTE_RIGHTS[r]) });
const unknownPolicy = problem(404, 'No policy of that name is configured.', ['unknown-policy']);
const badJsonBody = (extra: ProblemType[] = []) => ({
  '400': problem(400, 'The body is not valid JSON, or a field is invalid (`field` names it); nothing reached the store.', ['invalid-json', 'invalid-request', ...extra]),
  '401': unauthorized,
  '403': forbidden,
  '404': unknownPolicy,
  '413': problem(413, `The body is over ${MAX_BODY_BYTES} bytes.`, ['payload-too-large']),
  '415': problem(415, 'The Content-Type is not application/json.', ['unsupported-media-type']),
  '422': problem(422, 'This Idempotency-Key was used before for another request (another cost, wait or route); nothing was applied.', ['idempotency-key-reused']),
});
const rateLimitHeaders = {
  RateLimit: header('RateLimit'),
  'RateLimit-Policy': header('RateLimit-Policy'),
  'X-RateLimit-Limit': header('X-RateLimit-Limit'),
  'X-RateLimit-Remaining': header('X-RateLimit-Remaining'),
  'X-RateLimit-Reset': header('X-RateLimit-Reset'),
  'X-RateLimit-Reason': header('X-RateLimit-Reason'),
};
const internalError = problem(
  undefined,
  'Another error, as problem+json: an unexpected one (a bug: it is logged); from the Node server, a request it could not read (408 request-timeout, 417 expectation-failed, 431 headers-too-large, 501 method-not-implemented, 501 transfer-coding-not-implemented for a Transfer-Encoding other than chunked, 400 invalid-request for a missing Host), from every entry 400 invalid-request for an empty Host or several, and from the Lambda entry 501 method-not-implemented for a method it cannot carry.',
  ['internal-error', 'request-timeout', 'expectation-failed', 'headers-too-large', 'method-not-implemented', 'transfer-coding-not-implemented', 'invalid-request'],
);


export const openApiDocument = withLimits({
  openapi: '3.1.0',
  info: {
    title: 'edge-limiter permit API',
    version: '1',
    description:
      'Other services ask for a permit and get 200 or 429: one atomic step of a token bucket (or of several limits at once) in the server\'s store, on the store\'s clock. ' +
      'A reservation (`maxWaitMs`) is decided in the same round trip: the answer says how long to sleep (`waitMs`) before acting; nobody polls. ' +
      'Costs settle after the fact with `POST /v1/adjustments`. A take or an adjustment that carries an `Idempotency-Key` is applied at most once within the server\'s idempotency window (5 minutes by default): a repeat gets the first answer with `repeated: true`. ' +
      'Every error is `application/problem+json` (RFC 9457) with a stable `type` URN.',
    license: { name: 'MIT', identifier: 'MIT' },
  },
  // Relative to where the document is read (/v1/openapi.json is one level below the service's base), so
  // a path prefix in front of the service (an API Gateway stage, a proxy) carries over.
  servers: [{ url: '..', description: 'The permit service this document was fetched from (Worker, Lambda or Node).' }],
  security: [{ bearer: [] }],
  tags: [
    { name: 'permits', description: 'Taking, reserving and settling tokens.' },
    { name: 'buckets', description: 'Reading and resetting one bucket.' },
    { name: 'operations', description: 'Health, statistics and this document.' },
  ],
  paths: {
    '/v1/permits': {
      post: {
        tags: ['permits'],
        operationId: 'takePermit',
        summary: 'Take tokens, or reserve them for a wait of at most maxWaitMs',
        ...needs('POST /v1/permits'),
        description:
          'Needs the `permit` right on the policy. All or nothing over every limit of the policy. With `maxWaitMs` above 0 a refusal that would pass within that wait becomes a reservation: 200 with `waitMs`, the time to sleep before acting (the tokens are taken at once; nobody polls). ' +
          'Only `200` and `429` carry a decision; with a policy that fails open, a store outage answers 200 with `reason: store_error` and no `remaining`.',
        parameters: [{ $ref: '#/components/parameters/IdempotencyKey' }],
        requestBody: { required: true, content: json(ref('PermitRequest')) },
        responses: {
          '200': { description: 'Allowed (act now, or after `waitMs`).', headers: rateLimitHeaders, content: json(ref('Decision')) },
          '429': {
            description: 'Refused: nothing was taken from any limit. `retryAfterMs` is the time until every limit admits the cost; `refusedBy` names the limits that refused.',
            headers: { ...rateLimitHeaders, 'Retry-After': header('Retry-After') },
            content: json(ref('Decision')),
          },
          ...badJsonBody(),
          '503': problem(503, 'The store is unavailable and the policy fails closed: nothing was taken. Retry after Retry-After.', ['store-unavailable'], {
            'Retry-After': header('Retry-After'),
            'RateLimit-Policy': header('RateLimit-Policy'),
          }),
          default: internalError,
        },
      },
    },
    '/v1/adjustments': {
      post: {
        tags: ['permits'],
        operationId: 'adjust',
        summary: 'Settle a charge by its actual cost, or adjust a bucket by any amount',
        ...needs('POST /v1/adjustments with a charge', 'POST /v1/adjustments'),
        description:
          'Two forms. A settlement names a `charge` (the Idempotency-Key of a take on this policy and key, which its answer gives back as `charge`) and the actual `cost` (at least 0): it applies actual minus what the charge took, per limit, so it refunds at most that charge (a take without an Idempotency-Key cannot be settled). It applies once: the same charge again answers the first settlement (`repeated: true`); again with another cost is a 409. It needs the `settle` right, and no Idempotency-Key (the charge is its key). ' +
          'Without a `charge`, an adjustment by any amount (below 0 a refund, above 0 a charge), which needs the `admin` right. Either is one atomic step on the store\'s clock. A refund never makes a limit fuller than full; a charge may put a limit into debt (up to its capacity beyond empty), which later takes wait out. ' +
          'Answers 200 with the bucket after (`allowed`: a take of 1 would pass now).',
        parameters: [{ $ref: '#/components/parameters/IdempotencyKey' }],
        requestBody: { required: true, content: json(ref('AdjustmentRequest')) },
        responses: {
          '200': { description: 'Applied; the bucket as it is now.', headers: rateLimitHeaders, content: json(ref('Decision')) },
          ...badJsonBody(),
          '404': problem(404, 'No policy of that name is configured; or, for a settlement, no take with that `charge` on this policy and key within the idempotency window (5 minutes by default): nothing was applied.', ['unknown-policy', 'unknown-charge']),
          '409': problem(409, 'A settlement of a charge settled before with another cost: nothing was applied.', ['charge-settled']),
          '503': problem(503, 'The store is unavailable: the adjustment may not have been applied (a settlement can be sent again with the same cost). Retry after Retry-After.', ['store-unavailable'], { 'Retry-After': header('Retry-After') }),
          default: internalError,
        },
      },
    },
    '/v1/buckets/{policy}/{key}': {
      parameters: [
        { name: 'policy', in: 'path', required: true, schema: { type: 'string', minLength: 1 } },
        { name: 'key', in: 'path', required: true, description: 'The bucket\'s key, percent-encoded (any characters; `/` as `%2F`), never empty, `.` or `..`: a URL parser drops those as dot segments, and the path left is another route.', schema: { type: 'string', minLength: 1 } },
      ],
      get: {
        tags: ['buckets'],
        operationId: 'peekBucket',
        summary: 'Read a bucket without taking from it',
        ...needs('GET /v1/buckets/{policy}/{key}'),
        description: 'Needs the `permit` right on the policy. 200 whatever the bucket holds (this request was not limited): `allowed` says whether a take of 1 would pass now. 503 when the store does not answer and the policy fails closed.',
        responses: {
          '200': { description: 'The bucket now.', headers: rateLimitHeaders, content: json(ref('Decision')) },
          '400': problem(400, 'The key is invalid.', ['invalid-request']),
          '401': unauthorized,
          '403': forbidden,
          '404': unknownPolicy,
          '503': problem(503, 'The store is unavailable and the policy fails closed.', ['store-unavailable'], {
            'Retry-After': header('Retry-After'),
            'RateLimit-Policy': header('RateLimit-Policy'),
          }),
          default: internalError,
        },
      },
      delete: {
        tags: ['buckets'],
        operationId: 'resetBucket',
        summary: 'Reset a bucket to full',
        ...needs('DELETE /v1/buckets/{policy}/{key}'),
        description: 'Needs the `admin` right on the policy. Each reset writes an audit log line naming the token.',
        responses: {
          '204': { description: 'Reset.' },
          '400': problem(400, 'The key is invalid.', ['invalid-request']),
          '401': unauthorized,
          '403': forbidden,
          '404': unknownPolicy,
          '503': problem(503, 'The store is unavailable: nothing was reset.', ['store-unavailable'], { 'Retry-After': header('Retry-After') }),
          default: internalError,
        },
      },
    },
    '/v1/stats': {
      get: {
        tags: ['operations'],
        operationId: 'stats',
        summary: "This node's decision counts and most refused keys",
        ...needs('GET /v1/stats'),
        description: 'Needs the `stats` right, and holds only the policies the token may use. Each node (Node process, Lambda container, Workers isolate) reports what it decided itself, since it started.',
        responses: {
          '200': { description: 'The counts.', headers: { 'Cache-Control': header('Cache-Control') }, content: json(ref('Stats')) },
          '401': unauthorized,
          '403': forbidden,
          default: internalError,
        },
      },
    },
    '/v1/openapi.json': {
      get: {
        tags: ['operations'],
        operationId: 'openApiDocument',
        summary: 'This document',
        security: [],
        responses: {
          '200': { description: 'The OpenAPI 3.1 document.', headers: { 'Cache-Control': header('Cache-Control') }, content: json({ type: 'object' }) },
          default: internalError,
        },
      },
    },
    '/healthz': {
      get: {
        tags: ['operations'],
        operationId: 'health',
        summary: 'Whether the store answers and decisions can reach it',
        description: 'One store ping at most a second, shared by the probes that arrive meanwhile.',
        security: [],
        responses: {
          '200': { description: 'Healthy.', content: json(ref('Health')) },
          '503': { description: 'The store did not answer, or the in-flight cap of store calls is reached.', content: json(ref('Health')) },
          default: internalError,
        },
      },
    },
  },
  components: {
    securitySchemes: {
      bearer: { type: 'http', scheme: 'bearer', description: 'One of the server\'s PERMIT_TOKENS. Each has rights (`permit`, `settle`, `admin`, `stats`) on some policies; each operation names the right it needs (`x-required-right`).' },
    },
    parameters: {
      IdempotencyKey: {
        name: 'Idempotency-Key',
        in: 'header',
        required: false,
        description:
          'draft-ietf-httpapi-idempotency-key-header: an operation id, as a Structured Field String (`"…"`) or the same text unquoted. ' +
          `1 to ${MAX_IDEMPOTENCY_KEY_BYTES} printable ASCII characters. A repeat within the server's window gets the first answer (\`repeated: true\`) and changes nothing; the same id with another request is a 422. ` +
          'With it, a client may retry a request that got no answer.',
        // Quoted, each `"` and `\\` escaped: at most twice the characters, and the quotes.
        schema: { type: 'string', minLength: 1, maxLength: 2 * MAX_IDEMPOTENCY_KEY_BYTES + 2 },
      },
    },
    schemas: SCHEMAS,
  },
} as const, { ref, json, problem, unauthorized, forbidden, needs, unknownPolicy, internalError, retryAfter: header('Retry-After') });

/** The document's JSON as served and as kept in openapi.json (2-space indent, a final newline). */
export const openApiJson = `${JSON.stringify(openApiDocument, null, 2)}\n`;
