// Gateway refusals the Node and Lambda entries add to the forwarder's own (app.ts refuseGated). The
// Worker needs none of them: workerd takes Connection off a request before the Worker sees it.
import type { Context } from 'hono';
import type { AppConfig } from './env.js';
import { problemResponse } from '../../src/http/problem.js';

/**
 * With GATE_KEY=header:<name>, refuses (400 invalid-request) a request whose Connection header names
 * that header. The gateway drops every field Connection names (hop-by-hop, RFC 9110 §7.6.1), so the
 * request would be limited by a value the origin never receives and cannot check: a client rotating it
 * would get a fresh bucket per request (review 6, F1). Undefined when the gateway keys by address.
 */
export function keyInConnection(gate: AppConfig['gate']): ((c: Context) => Response | undefined) | undefined {
  if (!gate || gate.key === 'ip') return undefined;
  const name = gate.key.header;
  return (c) => {
    // With `_` read as `-`, as the gateway reads the names Connection lists (gateway.ts endToEnd).
    const listed = (c.req.header('connection') ?? '').split(',').map((t) => t.trim().toLowerCase().replace(/_/g, '-'));
    return listed.includes(name) ? problemResponse('invalid-request', `the Connection header names ${name}, the header the gateway limits by; it would not reach the origin`) : undefined;
  };
}
