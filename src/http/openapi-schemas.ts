// The OpenAPI document's schemas (components.schemas of src/http/openapi.ts): the request bodies, the
// Decision, and the problem and stats bodies, as the permit API reads and writes them.
import { MAX_ADJUST_TOKENS, MAX_IDEMPOTENCY_KEY_BYTES, MAX_KEY_BYTES, MAX_PERMIT_WAIT_MS } from '../core/key.js';
import { RIGHTS } from './auth.js';
import { PROBLEMS, problemType, type ProblemType } from './problem.js';

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const int = (description: string, extra: object = {}) => ({ type: 'integer', description, ...extra });
const nonNegative = (description: string) => int(description, { minimum: 0 });

export const SCHEMAS = {
  PermitRequest: {
    type: 'object',
    additionalProperties: false,
    required: ['policy', 'key'],
    properties: {
      policy: { type: 'string', minLength: 1, description: 'A configured policy\'s name.' },
      key: { $ref: '#/components/schemas/Key' },
      cost: {
        description: 'Tokens to take: a number charges every limit that many; an object charges each named limit its own (limits left out: 0). Default 1. At most the (smallest) capacity.',
        oneOf: [
          { type: 'integer', minimum: 1 },
          { type: 'object', minProperties: 1, additionalProperties: { type: 'integer', minimum: 0 } },
        ],
      },
      maxWaitMs: { type: 'integer', minimum: 0, maximum: MAX_PERMIT_WAIT_MS, description: 'Longest reservation to accept, in ms (default 0: a plain take).' },
    },
  },
  AdjustmentRequest: {
    type: 'object',
    additionalProperties: false,
    required: ['policy', 'key', 'cost'],
    properties: {
      policy: { type: 'string', minLength: 1, description: 'A configured policy\'s name.' },
      key: { $ref: '#/components/schemas/Key' },
      charge: {
        type: 'string',
        pattern: '^[\\x20-\\x7e]+$',
        minLength: 1,
        maxLength: MAX_IDEMPOTENCY_KEY_BYTES,
        description: 'A settlement: the charge settled, the Idempotency-Key its take was sent with (the take\'s answer gives it as `charge`). Needs the `settle` right; without it, the body is an adjustment by any amount (`admin`).',
      },
      cost: {
        description:
          'With a `charge`: what the work really cost, at least 0 (0: all of the charge goes back). Without: below 0 a refund, above 0 a charge, not 0 on every limit. A number applies to every limit, an object per named limit (left out: 0).',
        oneOf: [
          { type: 'integer', minimum: -MAX_ADJUST_TOKENS, maximum: MAX_ADJUST_TOKENS },
          { type: 'object', minProperties: 1, additionalProperties: { type: 'integer', minimum: -MAX_ADJUST_TOKENS, maximum: MAX_ADJUST_TOKENS } },
        ],
      },
    },
    if: { properties: { charge: { type: 'string' } }, required: ['charge'] },
    then: {
      properties: {
        cost: { oneOf: [{ type: 'integer', minimum: 0 }, { type: 'object', additionalProperties: { type: 'integer', minimum: 0 } }] },
      },
    },
    else: { properties: { cost: { not: { const: 0 } } } },
  },
  Key: {
    type: 'string',
    minLength: 1,
    maxLength: MAX_KEY_BYTES,
    not: { enum: ['.', '..'] },
    description: `The bucket's key: well-formed Unicode, at most ${MAX_KEY_BYTES} bytes of UTF-8, not "." or "..".`,
  },
  Decision: {
    type: 'object',
    additionalProperties: false,
    required: ['allowed', 'policy', 'key', 'limit', 'retryAfterMs', 'waitMs'],
    properties: {
      allowed: { type: 'boolean', description: 'Whether the request may proceed (after `waitMs`).' },
      policy: { type: 'string' },
      key: { type: 'string' },
      limit: { type: 'number', description: 'Capacity of the most constraining limit.' },
      remaining: nonNegative('Whole tokens left in the most constraining limit (absent when the store did not answer).'),
      retryAfterMs: nonNegative('0 when allowed; otherwise ms until every limit admits the cost.'),
      resetAfterMs: nonNegative('Ms until the most constraining limit is full again (absent when the store did not answer).'),
      waitMs: nonNegative('Ms to sleep before acting on an allowed reservation; 0 for an immediate permit.'),
      reason: { type: 'string', enum: ['store_error', 'deny_cache', 'lease', 'local', 'blocked'], description: 'Why the bucket in the store did not decide alone; absent when it did. `blocked`: the key is blocked (PUT /v1/blocks), refused until `retryAfterMs` has passed.' },
      repeated: { const: true, description: 'The Idempotency-Key (or a settlement\'s charge) was applied before: this is the first answer, and nothing was charged again.' },
      charge: { type: 'string', description: 'A take sent with an Idempotency-Key: that key, which names this charge for a settlement (`POST /v1/adjustments` with `charge`).' },
      limits: { type: 'array', items: ref('LimitDecision'), description: 'A policy of several limits: each limit\'s numbers, in the policy\'s order.' },
      refusedBy: { type: 'array', items: { type: 'string' }, minItems: 1, description: 'A 429 of a policy of several limits: the limits that refused.' },
    },
  },
  LimitDecision: {
    type: 'object',
    additionalProperties: false,
    required: ['name', 'limit', 'remaining', 'resetAfterMs', 'retryAfterMs', 'waitMs'],
    properties: {
      name: { type: 'string' },
      limit: { type: 'number', description: 'Its capacity.' },
      remaining: nonNegative('Whole tokens left in it.'),
      resetAfterMs: nonNegative('Ms until it is full again.'),
      retryAfterMs: nonNegative('On a refusal, ms until it admits its cost (0: another limit refused).'),
      waitMs: nonNegative('On a reservation, ms until its part is due.'),
    },
  },
  Problem: {
    type: 'object',
    additionalProperties: false,
    required: ['type', 'title', 'status', 'detail'],
    properties: {
      type: { type: 'string', enum: (Object.keys(PROBLEMS) as ProblemType[]).map(problemType), description: 'Stable: branch on it.' },
      title: { type: 'string' },
      status: { type: 'integer' },
      detail: { type: 'string', description: 'For people; may change.' },
      field: { type: 'string', description: 'invalid-request, unknown-policy, idempotency-key-reused: the request field at fault (a body field, `cost.<limit>`, or `Idempotency-Key`).' },
      policy: { type: 'string', description: 'store-unavailable: the policy; forbidden: the policy the token may not use.' },
      right: { type: 'string', enum: [...RIGHTS], description: 'forbidden: the right the token lacks.' },
      retryAfterMs: nonNegative('store-unavailable on a take: ms until a retry may pass.'),
    },
  },
  Health: {
    type: 'object',
    additionalProperties: false,
    required: ['ok', 'store', 'pendingStoreCalls', 'maxPendingStoreCalls', 'circuit', 'leases', 'localKeys'],
    properties: {
      ok: { type: 'boolean' },
      store: { type: 'string', description: "The store's name: memory, redis (also through Upstash), mongodb or durable-object." },
      pendingStoreCalls: nonNegative('Store calls in flight.'),
      maxPendingStoreCalls: nonNegative('The cap: at it, decisions fail without calling the store.'),
      circuit: { type: 'string', enum: ['closed', 'open', 'half-open'] },
      leases: {
        type: 'object',
        additionalProperties: false,
        required: ['keys', 'tokens'],
        properties: { keys: nonNegative('Keys holding a token lease on this node.'), tokens: nonNegative('Tokens they hold.') },
      },
      localKeys: nonNegative('Keys with a local fallback bucket on this node.'),
    },
  },
  Stats: {
    type: 'object',
    additionalProperties: false,
    required: ['since', 'topKeys', 'policies'],
    properties: {
      since: { type: 'string', format: 'date-time' },
      topKeys: nonNegative('Refused keys kept per policy (0: counters only).'),
      policies: { type: 'object', additionalProperties: ref('PolicyStats') },
    },
  },
  PolicyStats: {
    type: 'object',
    additionalProperties: false,
    required: ['decisions', 'peeks', 'refused', 'topRefused'],
    properties: {
      decisions: { type: 'object', additionalProperties: { type: 'integer', minimum: 0 }, description: 'By outcome: allowed, denied, or the decision\'s reason.' },
      peeks: nonNegative('Bucket reads.'),
      refused: nonNegative('Refusals other than store_error.'),
      topRefused: { type: 'array', items: ref('RefusedKey') },
    },
  },
  RefusedKey: {
    type: 'object',
    additionalProperties: false,
    required: ['key', 'count', 'error', 'firstSeen', 'lastSeen'],
    properties: {
      key: { type: 'string' },
      count: nonNegative('Refusals, at most.'),
      error: nonNegative('`count - error` is the least it can be.'),
      firstSeen: { type: 'string', format: 'date-time' },
      lastSeen: { type: 'string', format: 'date-time' },
    },
  },
} as const;
