// The gateway's transport on Node and Lambda: node:http(s) instead of fetch. Node's fetch clones a
// request whenever its redirect mode is not "error" (undici, per the fetch spec's HTTP-network-or-cache
// fetch), and cloning tees the body: the copy nobody reads holds the whole upload until the forward ends
// (a 300 MB POST took the gateway from 89 MB to 397 MB of RSS). Here the body is written as it is read,
// waiting for 'drain', so memory stays bounded whatever the size. The origin's response is returned as
// received: no redirect is followed and no body is decoded (Accept-Encoding is the client's).
//
// The body's framing is set here, explicitly, for every method: Content-Length when the gateway knows
// the length (and Node is told to fail the request if the body is longer or shorter), else chunked.
// Node's own default frames a streamed body only for some methods: a DELETE or OPTIONS body went out
// raw, and a keep-alive origin read it as the next request (issue 30). undici's dispatcher would frame
// it too, but bundled it is some 450 KiB, four times the memory store's whole Lambda bundle.
import { Agent as HttpAgent, request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { Readable } from 'node:stream';
import type { ForwardSend } from '../../src/http/gateway.js';

const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

// Statuses whose response has no body (a Response cannot be built with one).
const NULL_BODY = new Set([204, 205, 304]);

function drained(out: ClientRequest): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      out.off('drain', done);
      out.off('close', done);
      resolve();
    };
    out.on('drain', done);
    out.on('close', done);
  });
}

/** Writes the body with backpressure. A body that fails (a limit, the client gone) destroys the request. */
async function pump(body: ReadableStream<Uint8Array>, out: ClientRequest): Promise<void> {
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (out.destroyed) return;
      if (done) break;
      if (!out.write(value)) await drained(out);
    }
    out.end();
  } catch (err) {
    out.destroy(err instanceof Error ? err : new Error(String(err)));
  } finally {
    reader.releaseLock();
  }
}

function toResponse(res: IncomingMessage, method: string): Response {
  const headers = new Headers();
  for (let i = 0; i < res.rawHeaders.length; i += 2) headers.append(res.rawHeaders[i]!, res.rawHeaders[i + 1]!);
  const status = res.statusCode ?? 502;
  // A status no response may carry, which @hono/node-server's lazy Response would only refuse later,
  // outside the forward (a 500): the origin's answer is no HTTP answer, so the forward fails (a 502).
  if (status < 200 || status > 599) throw new RangeError(`the origin answered status ${status}`);
  if (method === 'HEAD' || NULL_BODY.has(status)) {
    res.resume();
    // A 204 has no content and so no Content-Length (RFC 9110 §8.6); HEAD and 304 keep the origin's.
    if (status === 204) headers.delete('content-length');
    return new Response(null, { status, statusText: res.statusMessage, headers });
  }
  return new Response(Readable.toWeb(res) as ReadableStream<Uint8Array>, { status, statusText: res.statusMessage, headers });
}

export const nodeSend: ForwardSend = (url, init) =>
  new Promise<Response>((resolve, reject) => {
    const target = new URL(url);
    const secure = target.protocol === 'https:';
    const headers: Record<string, string> = {};
    init.headers.forEach((value, name) => {
      // Framing is this transport's alone, whatever the caller put in the headers.
      if (name !== 'content-length' && name !== 'transfer-encoding') headers[name] = value;
    });
    if (init.body) {
      if (init.length === null) headers['transfer-encoding'] = 'chunked';
      else headers['content-length'] = String(init.length);
    }
    let out: ClientRequest;
    try {
      out = (secure ? httpsRequest : httpRequest)(target, { method: init.method, headers, agent: secure ? agents.https : agents.http, signal: init.signal }, (res) => {
        try {
          resolve(toResponse(res, init.method));
        } catch (err) {
          // e.g. a status a Response cannot carry
          res.destroy();
          reject(err);
        }
      });
    } catch (err) {
      reject(err); // e.g. a header value Node refuses to send
      return;
    }
    // A body longer or shorter than its Content-Length fails the request (ERR_HTTP_CONTENT_LENGTH_MISMATCH)
    // and closes its connection, instead of sending bytes the origin would frame differently.
    // (An OutgoingMessage property since Node 18.10; @types/node declares it on ServerResponse only.)
    (out as ClientRequest & { strictContentLength: boolean }).strictContentLength = true;
    out.on('error', reject);
    // A 101 (Switching Protocols) to a request that asked for no upgrade: Node emits neither a response
    // nor an error, only 'upgrade' and 'close', and an abort then finds the request already destroyed.
    // The gateway forwards no upgrade: the origin's socket is let go, and the forward fails (a 502).
    out.on('upgrade', (_res: IncomingMessage, socket: { destroy(): void }) => {
      socket.destroy();
      reject(new Error('the origin switched protocols'));
    });
    // Whatever else ends the request before a response: the promise settles (no-op once it has).
    out.on('close', () => reject(new Error('the connection to the origin closed before a response')));
    if (init.body) void pump(init.body, out);
    else out.end();
  });
