// The runtime-limits part of the OpenAPI document (src/http/openapi.ts passes its document through
// withLimits): the operations of ./limits-routes.ts, their schemas, and Decision.limitsInForce. It is
// given openapi.ts's helpers rather than importing them, so the two modules do not import each other.
import { MAX_KEY_BYTES } from '../core/key.js';
import type { LimitsRoute } from './limits-routes.js';
import type { ProblemType } from './problem.js';

/** What openapi.ts lends this part: its response helpers and shared responses. */
export interface OpenApiParts {
  ref(name: string): { $ref: string };
  json(schema: object): object;
  problem(status: number | undefined, description: string, types: ProblemType[], headers?: Record<string, object>): object;
  unauthorized: object;
  forbidden: object;
  /** `x-required-right` of a route (./auth.ts's table). */
  needs(route: LimitsRoute): object;
  unknownPolicy: object;
  internalError: object;
  retryAfter: object;
}

const MAX_CHANGE_MS = 400 * 86_400_000;

export function limitsOpenApi(p: OpenApiParts) {
  const { ref, json, problem } = p;
  const policyParam = { name: 'policy', in: 'path', required: true, schema: { type: 'string', minLength: 1 } };
  const keyParam = { name: 'key', in: 'path', required: true, description: 'The bucket\'s key, percent-encoded (any characters; `/` as `%2F`), never empty, `.` or `..`: a URL parser drops those as dot segments, and the path left is another route.', schema: { type: 'string', minLength: 1, maxLength: 3 * MAX_KEY_BYTES } };
  const bad = (what: string) => problem(400, `${what} (\`field\` names it); nothing reached the store.`, ['invalid-json', 'invalid-request']);
  const unavailable = problem(503, 'The store did not answer: the change may or may not have been applied. Retry after Retry-After (a change is idempotent: it sets, it does not add).', ['store-unavailable'], { 'Retry-After': p.retryAfter });
  const unsupported = problem(501, 'The store keeps no runtime limits: nothing was changed (do not retry).', ['runtime-limits-unsupported']);
  const full = problem(507, 'No room for another override record (memoryStore maxOverrides): nothing was changed (do not retry).', ['overrides-full']);
  const common = { '401': p.unauthorized, '403': p.forbidden, '404': p.unknownPolicy, '501': unsupported, '503': unavailable, default: p.internalError };
  const changed = (schema: string, description: string) => ({ '200': { description, content: json(ref(schema)) } });
  const body = (schema: string) => ({ required: true, content: json(ref(schema)) });
  const tags = ['limits'];

  const paths = {
    '/v1/limits/{policy}/{key}': {
      parameters: [policyParam, keyParam],
      get: {
        tags,
        operationId: 'getKeyLimits',
        ...p.needs('GET /v1/limits/{policy}/{key}'),
        summary: "A key's limits in force: its own, a policy-wide change's or the policy's; and its block",
        responses: { ...changed('KeyLimits', 'The key\'s limits now (one store read).'), '400': problem(400, 'The key is invalid.', ['invalid-request']), ...common },
      },
      put: {
        tags,
        operationId: 'setKeyLimits',
        ...p.needs('PUT /v1/limits/{policy}/{key}'),
        summary: "Set a key's own numbers (until expiresInMs, or until cleared)",
        description:
          'Stored beside the bucket and read in the same atomic step by every decision on the key, on every node: the next decision anywhere uses them. Tokens spent stay spent: the bucket\'s whole debt is carried to the new numbers (rounded against the caller), whatever the new capacity. ' +
          'The body is written as the policy\'s limits are: `capacity` and `refillPerSecond` (or `refill`) for a policy of one limit; `limits` naming some or all limits of a policy with several. Wins over a policy-wide change.',
        requestBody: body('LimitsRequest'),
        responses: { ...changed('KeyLimits', 'Set: the key\'s limits now, and `previous`.'), '400': bad('The body is not valid JSON, or a field is invalid'), ...common, '507': full },
      },
      delete: {
        tags,
        operationId: 'clearKeyLimits',
        ...p.needs('DELETE /v1/limits/{policy}/{key}'),
        summary: "Drop a key's own numbers (the bucket is carried back)",
        responses: { ...changed('KeyLimits', 'Cleared: the key\'s limits now, and `previous`.'), '400': problem(400, 'The key is invalid.', ['invalid-request']), ...common },
      },
    },
    '/v1/limits/{policy}': {
      parameters: [policyParam],
      get: {
        tags,
        operationId: 'getPolicyLimits',
        ...p.needs('GET /v1/limits/{policy}'),
        summary: 'The policy-wide change in force, if any',
        responses: { ...changed('PolicyLimits', 'The policy\'s numbers now (one store read).'), ...common },
      },
      put: {
        tags,
        operationId: 'setPolicyLimits',
        ...p.needs('PUT /v1/limits/{policy}'),
        summary: 'Change the numbers of every key of the policy that has none of its own',
        description: 'Each node reads the change at most every `policyRefreshMs` (1000 ms by default): it is obeyed everywhere within that plus one store round trip, at once on the node that answers this request.',
        requestBody: body('LimitsRequest'),
        responses: { ...changed('PolicyLimits', 'Set: the policy\'s numbers now, and `previous`.'), '400': bad('The body is not valid JSON, or a field is invalid'), ...common },
      },
      delete: {
        tags,
        operationId: 'clearPolicyLimits',
        ...p.needs('DELETE /v1/limits/{policy}'),
        summary: 'End the policy-wide change (keys go back to the policy\'s numbers within the same bound)',
        responses: { ...changed('PolicyLimits', 'Cleared: the policy\'s numbers now, and `previous`.'), ...common },
      },
    },
    '/v1/blocks/{policy}/{key}': {
      parameters: [policyParam, keyParam],
      put: {
        tags,
        operationId: 'blockKey',
        ...p.needs('PUT /v1/blocks/{policy}/{key}'),
        summary: 'Refuse every take on a key for forMs, whatever its bucket holds',
        description: 'Takes on a blocked key answer 429 with `reason: blocked`, `X-RateLimit-Reason: blocked` and a Retry-After until the block ends, on every node; the node answering this request gives its lease of the key back at once.',
        requestBody: body('BlockRequest'),
        responses: { ...changed('KeyLimits', 'Blocked: the key\'s state now (`blockedForMs`), and `previous`.'), '400': bad('The body is not valid JSON, or `forMs` is invalid'), ...common, '507': full },
      },
      delete: {
        tags,
        operationId: 'unblockKey',
        ...p.needs('DELETE /v1/blocks/{policy}/{key}'),
        summary: "End a key's block now",
        responses: { ...changed('KeyLimits', 'Unblocked: the key\'s state now, and `previous`.'), '400': problem(400, 'The key is invalid.', ['invalid-request']), ...common },
      },
    },
  };

  const limit = {
    type: 'object',
    additionalProperties: false,
    required: ['capacity'],
    properties: {
      capacity: { type: 'integer', minimum: 1, maximum: 1e9, description: 'Tokens the bucket holds when full.' },
      refillPerSecond: { type: 'number', minimum: 1e-6, maximum: 1e6, description: 'Tokens added per second, continuously.' },
      refill: { type: 'string', description: 'The refill per second, minute, hour or day (`1000/day`), instead of refillPerSecond.' },
    },
  };
  const state = (extra: Record<string, object>, required: string[], blocks = true) => ({
    type: 'object',
    additionalProperties: false,
    required: [...required, 'limits', 'source'],
    properties: {
      ...extra,
      limits: { type: 'array', items: ref('LimitNumbers'), description: 'Each limit\'s numbers in force, in the policy\'s order.' },
      source: { type: 'string', enum: ['policy', 'key', 'policy-wide'], description: '`policy`: the configured numbers; `key`: this key\'s own (PUT /v1/limits/{policy}/{key}); `policy-wide`: a policy-wide change (PUT /v1/limits/{policy}).' },
      expiresInMs: { type: 'integer', minimum: 0, description: 'Ms until the numbers end and the policy\'s apply again (absent: until cleared).' },
      ...(blocks ? { blockedForMs: { type: 'integer', minimum: 0, description: 'Ms until the key\'s block ends (absent: not blocked).' } } : {}),
    },
  });
  const schemas = {
    LimitsRequest: {
      type: 'object',
      additionalProperties: false,
      description: 'A policy of one limit: `capacity` with `refillPerSecond` or `refill`. A policy with several: `limits`, naming some or all of them (the others keep the policy\'s numbers).',
      properties: {
        ...limit.properties,
        limits: { type: 'object', minProperties: 1, additionalProperties: limit, description: 'Per limit of a policy with several, by name.' },
        expiresInMs: { type: 'integer', minimum: 1, maximum: MAX_CHANGE_MS, description: 'The numbers end this many ms after the store applies them (absent: until cleared).' },
      },
    },
    BlockRequest: {
      type: 'object',
      additionalProperties: false,
      required: ['forMs'],
      properties: { forMs: { type: 'integer', minimum: 1, maximum: MAX_CHANGE_MS, description: 'How long the key is refused, in ms of the store\'s clock.' } },
    },
    LimitNumbers: {
      type: 'object',
      additionalProperties: false,
      required: ['name', 'capacity', 'refillPerSecond'],
      properties: {
        name: { type: 'string', description: 'The limit\'s name (a policy of one limit: the policy\'s).' },
        capacity: { type: 'integer', minimum: 1, description: 'Tokens the bucket holds when full.' },
        refillPerSecond: { type: 'number', exclusiveMinimum: 0, description: 'Tokens added per second, continuously.' },
      },
    },
    LimitsState: state({}, []),
    KeyLimits: state({ policy: { type: 'string' }, key: { type: 'string' }, previous: ref('LimitsState') }, ['policy', 'key']),
    PolicyLimits: state({ policy: { type: 'string' }, previous: ref('LimitsState') }, ['policy'], false),
  };
  return { paths, schemas, tag: { name: 'limits', description: 'Runtime limits: a key\'s own numbers, a policy-wide change, and blocks.' } };
}

type Doc = { tags: readonly object[]; paths: object; components: { schemas: { Decision: { properties: object } } } };

/** The document with the runtime-limits operations, their schemas and tag, and Decision.limitsInForce. */
export function withLimits<T extends Doc>(doc: T, p: OpenApiParts): T {
  const { paths, schemas, tag } = limitsOpenApi(p);
  const { Decision } = doc.components.schemas;
  const limitsInForce = {
    type: 'array',
    items: p.ref('LimitNumbers'),
    description: 'The key\'s numbers were changed at runtime (PUT /v1/limits): each limit\'s numbers in force, under which every number above was computed. Absent: the policy\'s own.',
  };
  return {
    ...doc,
    tags: [...doc.tags, tag],
    paths: { ...doc.paths, ...paths },
    components: { ...doc.components, schemas: { ...doc.components.schemas, Decision: { ...Decision, properties: { ...Decision.properties, limitsInForce } }, ...schemas } },
  };
}
