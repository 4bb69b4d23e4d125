// RFC 9457 problem details with a stable `type` per error. Every refusal the HTTP layers make goes through here.

/** Every problem type the HTTP layers answer, with its HTTP status and title. */
export const PROBLEMS = {
  'invalid-json': { status: 400, title: 'Malformed JSON body' },
  'invalid-request': { status: 400, title: 'Invalid request' },
  unauthorized: { status: 401, title: 'Missing or invalid bearer token' },
  forbidden: { status: 403, title: 'Outside the token\'s scope' },
  'unknown-policy': { status: 404, title: 'Unknown policy' },
  'not-found': { status: 404, title: 'Not found' },
  'unknown-charge': { status: 404, title: 'No such charge to settle' },
  'method-not-allowed': { status: 405, title: 'Method not allowed' },
  'request-timeout': { status: 408, title: 'Request not received in time' },
  'payload-too-large': { status: 413, title: 'Body too large' },
  'expectation-failed': { status: 417, title: 'Expectation not met' },
  'unsupported-media-type': { status: 415, title: 'Body must be application/json' },
  'charge-settled': { status: 409, title: 'Charge already settled with another cost' },
  'idempotency-key-reused': { status: 422, title: 'Idempotency key already used for another request' },
  'rate-limited': { status: 429, title: 'Too many requests' },
  'headers-too-large': { status: 431, title: 'Request header fields too large' },
  'server-misconfigured': { status: 500, title: 'Server configuration is invalid' },
  'internal-error': { status: 500, title: 'Internal error' },
  'method-not-implemented': { status: 501, title: 'Method not supported' },
  'transfer-coding-not-implemented': { status: 501, title: 'Transfer coding not supported' },
  'runtime-limits-unsupported': { status: 501, title: 'The store keeps no runtime limits' },
  'bad-gateway': { status: 502, title: 'Origin unreachable' },
  'store-unavailable': { status: 503, title: 'Rate-limit store unavailable' },
  'gateway-timeout': { status: 504, title: 'Origin did not answer in time' },
  'overrides-full': { status: 507, title: 'No room for another override record' },
} as const;

/** The name of a problem type: a key of PROBLEMS. */
export type ProblemType = keyof typeof PROBLEMS;

/** The stable `type` URI of a problem. */
export const problemType = (t: ProblemType) => `urn:edge-limiter:problem:${t}`;

/** An RFC 9457 application/problem+json Response of a stable `type` (urn:edge-limiter:problem:<type>) with its status. */
export function problemResponse(
  type: ProblemType,
  detail: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Response {
  const { status, title } = PROBLEMS[type];
  return new Response(JSON.stringify({ type: problemType(type), title, status, detail, ...extra }), {
    status,
    headers: { 'Content-Type': 'application/problem+json', ...headers },
  });
}
