// The gateway on the Node entry (`npm start`, raw sockets) and the Lambda entry (real event shapes),
// judged by the bytes a raw TCP origin receives and by what the client gets back (review 6): a key
// header the client names in Connection (F1), an origin answering 101 or a status outside 200-599
// (F2, F3), a request pipelined behind an Upgrade request (F4), framing and hop-by-hop names written
// with `_` (F5).
import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNodeServer, type NodeServer } from '../support/node-server.js';
import { KINDS, context, lambdaEvent, loadLambda, resultBytes, resultHeader, type LambdaHandler } from '../support/lambda-events.js';

/** What each path's request gets from the origin, written raw (whatever HTTP allows or not). */
const ANSWERS: Record<string, string> = {
  '/101': 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n',
  '/600': 'HTTP/1.1 600 Weird\r\nContent-Length: 2\r\n\r\nok',
  '/099': 'HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\nok',
  '/204': 'HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n',
};
const OK = 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok';

interface RawOrigin {
  url: string;
  /** Every connection's bytes as received, and whether it has closed. */
  connections: { bytes: string; closed: boolean }[];
  /** The bytes of every request whose line starts with `line`. */
  requests(line: string): string[];
  close(): Promise<void>;
}

/** A TCP origin that reads bodiless requests and answers each from ANSWERS by its path (else 200 "ok"), keeping the connection. */
async function startRawOrigin(): Promise<RawOrigin> {
  const connections: { bytes: string; closed: boolean }[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    const entry = { bytes: '', closed: false };
    connections.push(entry);
    sockets.add(socket);
    let pending = '';
    socket.on('error', () => {});
    socket.on('close', () => ((entry.closed = true), sockets.delete(socket)));
    socket.on('data', (d: Buffer) => {
      entry.bytes += d.toString('latin1');
      pending += d.toString('latin1');
      for (let end = pending.indexOf('\r\n\r\n'); end >= 0; end = pending.indexOf('\r\n\r\n')) {
        const path = pending.split(' ')[1]!;
        pending = pending.slice(end + 4);
        socket.write(ANSWERS[path] ?? OK);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    connections,
    requests: (line) => connections.flatMap((c) => c.bytes.split(/(?=^[A-Z]+ \/)/m).filter((r) => r.startsWith(line))),
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

/** Writes `bytes` on a new connection; resolves with what came back once the server closed it or `waitMs` passed, and when it closed. */
function exchange(port: number, bytes: string, waitMs = 3000): Promise<{ text: string; closedAfterMs: number | undefined }> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    let text = '';
    let closedAfterMs: number | undefined;
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes, 'latin1'));
    const timer = setTimeout(() => (socket.destroy(), resolve({ text, closedAfterMs })), waitMs);
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.on('error', () => {});
    socket.on('close', () => {
      closedAfterMs ??= performance.now() - t0;
      clearTimeout(timer);
      resolve({ text, closedAfterMs });
    });
  });
}

const statusOf = (text: string) => Number(/^HTTP\/1\.1 (\d{3}) /.exec(text)?.[1] ?? 0);
const problemType = (text: string) => (/^content-type: application\/problem\+json\r$/im.test(text) ? (/"type":"urn:edge-limiter:problem:([a-z-]+)"/.exec(text)?.[1] ?? 'no type') : 'not problem+json');

const POLICIES = JSON.stringify({ gate: { capacity: 3, refillPerSecond: 0.001 } });
const TIMEOUT_MS = 2000;

let origin: RawOrigin;
beforeAll(async () => {
  origin = await startRawOrigin();
});
afterAll(() => origin.close());

describe('Node entry (npm start) in gateway mode', () => {
  let server: NodeServer;
  beforeAll(async () => {
    server = await startNodeServer({ LIMITER_STORE: 'memory', LIMITER_POLICIES: POLICIES, GATE_ORIGIN: origin.url, GATE_POLICY: 'gate', GATE_KEY: 'header:x-api-key', GATE_TIMEOUT_MS: String(TIMEOUT_MS) });
  });
  afterAll(() => server?.stop());

  it('a Connection header naming the key header (GATE_KEY=header:x-api-key) is refused 400 problem+json, nothing forwarded: the key would be limited here and dropped on the way (review 6, F1)', async () => {
    // X_Api_Key too: the gateway reads `_` as `-` in the names Connection lists.
    for (const [i, connection] of ['x-api-key', 'keep-alive, X-API-Key', ' X-Api-Key ,close', 'X_Api_Key'].entries()) {
      const { text } = await exchange(server.port, `GET /private-${i} HTTP/1.1\r\nHost: gw.example\r\nConnection: ${connection}\r\nX-Api-Key: rotating-${i}\r\n\r\n`, 1000);
      expect(statusOf(text), connection).toBe(400);
      expect(problemType(text), connection).toBe('invalid-request');
      expect(text).toContain('x-api-key');
      expect(origin.requests(`GET /private-${i} `), connection).toEqual([]);
    }
    // Another Connection token, or none: forwarded, the key header with it.
    const { text } = await exchange(server.port, 'GET /private-ok HTTP/1.1\r\nHost: gw.example\r\nConnection: keep-alive, x-hop\r\nX-Hop: 1\r\nX-Api-Key: kept\r\n\r\n', 1000);
    expect(statusOf(text)).toBe(200);
    const [forwarded] = origin.requests('GET /private-ok ');
    expect(forwarded).toMatch(/\r\nx-api-key: kept\r\n/i);
    expect(forwarded).not.toMatch(/x-hop/i);
  });

  it('framing and hop-by-hop names written with `_`, and a field Connection lists that way, do not reach the origin (review 6, F5)', async () => {
    const { text } = await exchange(
      server.port,
      'POST /underscore HTTP/1.1\r\nHost: gw.example\r\nX-Api-Key: kus\r\nTransfer_Encoding: chunked\r\nContent_Length: 50\r\nKeep_Alive: timeout=5\r\nProxy_Authorization: Basic eA==\r\nProxy_Connection: keep-alive\r\nConnection: close, x_hop\r\nX-Hop: 1\r\nX_Kept: 1\r\nContent-Length: 5\r\n\r\nhello',
    );
    expect(statusOf(text)).toBe(200);
    const [forwarded] = origin.requests('POST /underscore ');
    const head = forwarded!.slice(0, forwarded!.indexOf('\r\n\r\n'));
    expect(head).not.toMatch(/^(transfer|content|keep|proxy)_/im);
    expect(head).not.toMatch(/^x-hop:/im);
    expect(head).toMatch(/^x_kept: 1$/im);
    expect(forwarded).toMatch(/\r\ncontent-length: 5\r\n[^]*\r\n\r\nhello$/i);
  });

  it('an origin answering 101 gets the client a prompt 502 problem+json, not silence, and its connection is let go (review 6, F2)', async () => {
    const t0 = performance.now();
    const { text } = await exchange(server.port, 'GET /101 HTTP/1.1\r\nHost: gw.example\r\nX-Api-Key: k101\r\nConnection: close\r\n\r\n', TIMEOUT_MS + 3000);
    expect(statusOf(text), JSON.stringify(text)).toBe(502);
    expect(problemType(text)).toBe('bad-gateway');
    // Well before GATE_TIMEOUT_MS: the forward failed at the 101, it did not wait for the timeout.
    expect(performance.now() - t0).toBeLessThan(TIMEOUT_MS);
    const upgraded = origin.connections.filter((c) => c.bytes.includes('GET /101 '));
    expect(upgraded).toHaveLength(1);
    expect(upgraded[0]!.closed).toBe(true);
  });

  it('an origin status outside 200-599 is a 502 problem+json, not a 500; a 204 goes out without the Content-Length it carried (review 6, F3)', async () => {
    for (const path of ['/600', '/099']) {
      const { text } = await exchange(server.port, `GET ${path} HTTP/1.1\r\nHost: gw.example\r\nX-Api-Key: k${path}\r\nConnection: close\r\n\r\n`);
      expect(statusOf(text), path).toBe(502);
      expect(problemType(text), path).toBe('bad-gateway');
    }
    const { text } = await exchange(server.port, 'GET /204 HTTP/1.1\r\nHost: gw.example\r\nX-Api-Key: k204\r\nConnection: close\r\n\r\n');
    expect(statusOf(text)).toBe(204);
    expect(text).not.toMatch(/content-length/i);
  });

  it('a request pipelined behind an Upgrade request is not dropped in silence: the Upgrade request is served without upgrading and its answer closes the connection (review 6, F4)', async () => {
    const t0 = performance.now();
    const { text, closedAfterMs } = await exchange(
      server.port,
      'GET /u1 HTTP/1.1\r\nHost: gw.example\r\nX-Api-Key: ku\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nGET /u2 HTTP/1.1\r\nHost: gw.example\r\nX-Api-Key: ku\r\n\r\n',
      8000,
    );
    expect(statusOf(text)).toBe(200);
    const answers = text.match(/^HTTP\/1\.1 \d{3} /gm) ?? [];
    if (answers.length === 1) {
      // /u2 was not read: the answer tells the client so (Connection: close), and the connection closes
      // at once, not when keep-alive runs out.
      expect(text).toMatch(/^connection: close\r$/im);
      expect(closedAfterMs, 'the server closed the connection').toBeDefined();
      expect(closedAfterMs!).toBeLessThan(2000);
      expect(origin.requests('GET /u2 ')).toEqual([]);
    } else {
      expect(answers).toHaveLength(2);
      expect(origin.requests('GET /u2 ')).toHaveLength(1);
    }
    expect(performance.now() - t0).toBeLessThan(8000);
    // Forwarded once, without the upgrade.
    const [u1] = origin.requests('GET /u1 ');
    expect(u1).not.toMatch(/^upgrade:/im);
  });
});

describe('Lambda entry in gateway mode', () => {
  let handler: LambdaHandler;
  beforeAll(async () => {
    handler = await loadLambda({ LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: 'lambda-token', GATE_ORIGIN: origin.url, GATE_POLICY: 'gate', GATE_KEY: 'header:x-api-key', GATE_TIMEOUT_MS: String(TIMEOUT_MS) });
  });

  const invoke = (event: unknown, ms = TIMEOUT_MS + 3000) =>
    Promise.race([handler(event, context), new Promise<'pending'>((r) => setTimeout(() => r('pending'), ms))]);

  for (const kind of KINDS) {
    it(`${kind}: a Connection header naming the key header is refused 400 problem+json, nothing forwarded (review 6, F1)`, async () => {
      for (let i = 0; i < 4; i++) {
        const path = `/lambda-private-${kind}-${i}`;
        const res = await invoke(lambdaEvent(kind, { method: 'GET', path, headers: [['Connection', 'x-api-key'], ['X-Api-Key', `rotating-${kind}-${i}`]], drop: ['authorization', 'connection'] }));
        expect(res).not.toBe('pending');
        if (res === 'pending') return;
        expect(res.statusCode, path).toBe(400);
        expect(resultHeader(res, 'content-type')).toBe('application/problem+json');
        expect(JSON.parse(resultBytes(res).toString())).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request' });
        expect(origin.requests(`GET ${path} `)).toEqual([]);
      }
      const path = `/lambda-private-${kind}-ok`;
      const res = await invoke(lambdaEvent(kind, { method: 'GET', path, headers: [['X-Api-Key', `kept-${kind}`]], drop: ['authorization', 'connection'] }));
      expect(res !== 'pending' && res.statusCode).toBe(200);
      expect(origin.requests(`GET ${path} `)[0]).toMatch(new RegExp(`\\r\\nx-api-key: kept-${kind}\\r\\n`, 'i'));
    });
  }

  it('an origin answering 101 or a status outside 200-599: the invocation ends with 502 problem+json, the 101 well before GATE_TIMEOUT_MS (review 6, F2, F3)', async () => {
    for (const path of ['/101', '/600', '/099']) {
      const t0 = performance.now();
      const res = await invoke(lambdaEvent('apigw-v2', { method: 'GET', path, headers: [['X-Api-Key', `lambda${path}`]], drop: ['authorization', 'connection'] }));
      expect(res, path).not.toBe('pending');
      if (res === 'pending') return;
      expect(res.statusCode, path).toBe(502);
      expect(JSON.parse(resultBytes(res).toString())).toMatchObject({ type: 'urn:edge-limiter:problem:bad-gateway' });
      expect(performance.now() - t0, path).toBeLessThan(TIMEOUT_MS);
    }
    expect(origin.connections.filter((c) => c.bytes.includes('GET /101 ')).every((c) => c.closed)).toBe(true);
  });
});
