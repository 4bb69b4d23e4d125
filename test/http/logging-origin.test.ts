// The framing tests' origin (test/support/logging-origin.ts) sees what a keep-alive origin sees: an
// unframed body that holds a request is logged as a second request on the same connection.
import { connect } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startLoggingOrigin, type LoggingOrigin } from '../support/logging-origin.js';

let origin: LoggingOrigin;
beforeAll(async () => {
  origin = await startLoggingOrigin();
});
afterAll(() => origin.close());

/** Writes `bytes` on one connection and resolves once `answers` responses have arrived. */
function write(bytes: string, answers: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(origin.port, '127.0.0.1', () => socket.write(bytes));
    let text = '';
    const timer = setTimeout(() => (socket.destroy(), reject(new Error(`got ${JSON.stringify(text)}`))), 5000);
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      // Each default answer ends its head, then says `<method> <path> <body length>`.
      if ((text.match(/\r\n\r\n[A-Z]+ \/\S* \d+/g) ?? []).length >= answers) {
        clearTimeout(timer);
        socket.destroy();
        resolve(text);
      }
    });
  });
}

it('logs each request it parses, with its body, and an unframed body as the request it holds', async () => {
  const inner = 'GET /smuggled HTTP/1.1\r\nHost: origin\r\n\r\n';
  await write(`POST /framed HTTP/1.1\r\nHost: o\r\nContent-Length: ${inner.length}\r\n\r\n${inner}`, 1);
  await origin.settled();
  expect(origin.requests.map((r) => [r.method, r.path, r.body.toString('latin1'), r.complete])).toEqual([['POST', '/framed', inner, true]]);
  origin.clear();
  // A DELETE whose body has no framing: the origin reads the body as the next request.
  await write(`DELETE /item HTTP/1.1\r\nHost: o\r\n\r\n${inner}`, 2);
  await origin.settled();
  expect(origin.requests.map((r) => `${r.method} ${r.path}`)).toEqual(['DELETE /item', 'GET /smuggled']);
  expect(origin.requests[0]!.connection).toBe(origin.requests[1]!.connection);
  expect(origin.requests[0]!.body.length).toBe(0);
});
