// Gateway mode keeps the origin's encoding: the client's Accept-Encoding reaches the origin, and a gzip
// or br body comes back to the client byte for byte with its Content-Encoding and Content-Length, on
// every runtime the gateway runs on: the Node entry (`npm start`), the Lambda handler, and the Worker's
// deploy bundle inside workerd (Miniflare). Clients are raw node:http requests, which never decode.
// Where fetch decodes (Node's own fetch), the body arrives decoded and no header says otherwise.
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import { readFileSync } from 'node:fs';
import { brotliCompressSync, brotliDecompressSync, constants as zlib, gunzipSync, gzipSync } from 'node:zlib';
import { serve, type ServerType } from '@hono/node-server';
import { convertV4MiniflareOptions, Miniflare } from 'miniflare';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../../functions/app/env.js';
import { buildApp } from '../../functions/app/app.js';
import { memoryStore } from '../../src/index.js';
import { startNodeServer, type NodeServer } from '../support/node-server.js';
import { buildWorker } from '../support/worker.js';

// ~50 KB of text. Compressed at settings no runtime re-encodes with by default (gzip level 9, brotli
// quality 11), so a body that was decoded and encoded again on the way cannot match byte for byte.
const TEXT = Array.from({ length: 1500 }, (_, i) => `${String(i).padStart(4, '0')} the origin's text, line ${(i * 7919) % 1501}\n`).join('');
const ENCODED = {
  gzip: gzipSync(TEXT, { level: 9 }),
  br: brotliCompressSync(TEXT, { params: { [zlib.BROTLI_PARAM_QUALITY]: 11, [zlib.BROTLI_PARAM_SIZE_HINT]: TEXT.length } }),
} as const;
type Coding = keyof typeof ENCODED;
const decode = (coding: Coding, body: Buffer) => (coding === 'gzip' ? gunzipSync(body) : brotliDecompressSync(body)).toString();

/** The Accept-Encoding of every request the origin received, in order. */
const originSaw: (string | undefined)[] = [];
let origin: Server;
let originUrl: string;

const POLICIES = JSON.stringify({ gate: { capacity: 1000, refillPerSecond: 100 } });

beforeAll(async () => {
  // GET /gzip and /br: the pre-compressed bytes, only when the request accepts that coding; the text otherwise.
  origin = createServer((req, res) => {
    const accepts = req.headers['accept-encoding'];
    originSaw.push(accepts);
    const coding = req.url!.slice(1) as Coding;
    const offered = (accepts ?? '').split(',').map((c) => c.trim().split(';')[0]!.toLowerCase());
    if (coding in ENCODED && offered.includes(coding)) {
      res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Encoding': coding, 'Content-Length': ENCODED[coding].length, Vary: 'Accept-Encoding' });
      return res.end(ENCODED[coding]);
    }
    res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': Buffer.byteLength(TEXT), Vary: 'Accept-Encoding' });
    res.end(TEXT);
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', () => r()));
  originUrl = `http://127.0.0.1:${(origin.address() as { port: number }).port}`;
});
afterAll(async () => {
  await new Promise<void>((r) => origin.close(() => r()));
});

type Reply = { status: number; headers: IncomingHttpHeaders; body: Buffer };

/** A GET with node:http, which hands back the body as it came over the wire. */
function get(base: string, path: string, headers: Record<string, string>): Promise<Reply> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** The client asked for `coding` alone: the origin saw exactly that, and its bytes came back as they were (every miss is reported). */
function expectPassedThrough(coding: Coding, reply: { status: number; encoding: string | undefined; length: string | undefined; body: Buffer }, saw: string | undefined) {
  expect.soft(saw, 'the Accept-Encoding the origin saw').toBe(coding);
  expect.soft(reply.status).toBe(200);
  expect.soft(reply.encoding, 'Content-Encoding').toBe(coding);
  expect.soft(reply.length, 'Content-Length').toBe(String(ENCODED[coding].length));
  expect.soft(reply.body.length).toBe(ENCODED[coding].length);
  expect.soft(reply.body.equals(ENCODED[coding]), 'the body is the origin’s bytes').toBe(true);
  expect.soft(decode(coding, reply.body)).toBe(TEXT);
}

async function viaHttp(base: string, coding: Coding) {
  const before = originSaw.length;
  const r = await get(base, `/${coding}`, { 'Accept-Encoding': coding });
  expect(originSaw.length).toBe(before + 1);
  const reply = { status: r.status, encoding: r.headers['content-encoding'], length: r.headers['content-length'], body: r.body };
  return { reply, saw: originSaw.at(-1) };
}

describe('gateway mode passes an encoded response through byte for byte', () => {
  describe('the Node entry (npm start, node:http transport)', () => {
    let server: NodeServer;
    beforeAll(async () => {
      server = await startNodeServer({ LIMITER_STORE: 'memory', LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: 't', GATE_ORIGIN: originUrl });
    }, 60_000);
    afterAll(async () => {
      await server?.stop();
    });

    for (const coding of ['gzip', 'br'] as const) {
      it(`${coding}: the origin's bytes, Content-Encoding and Content-Length reach the client`, async () => {
        const { reply, saw } = await viaHttp(server.url, coding);
        expectPassedThrough(coding, reply, saw);
      });
    }
  });

  describe('the Lambda handler (API Gateway HTTP API v2 event)', () => {
    type LambdaResult = { statusCode: number; headers?: Record<string, string>; body: string; isBase64Encoded: boolean };
    let handler: (event: unknown, context: unknown) => Promise<LambdaResult>;
    const saved = { ...process.env };
    beforeAll(async () => {
      vi.resetModules();
      Object.assign(process.env, { LIMITER_STORE: 'memory', LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: 't', GATE_ORIGIN: originUrl });
      handler = (await import('../../functions/lambda.js')).handler as unknown as typeof handler;
    });
    afterAll(() => {
      for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
      Object.assign(process.env, saved);
    });

    const event = (coding: Coding) => {
      const e = JSON.parse(readFileSync(new URL('../fixtures/lambda/apigw-v2.json', import.meta.url), 'utf8'));
      e.rawPath = e.requestContext.http.path = `/${coding}`;
      e.requestContext.http.method = 'GET';
      e.routeKey = '$default';
      for (const h of ['authorization', 'content-length', 'content-type']) delete e.headers[h];
      e.headers['accept-encoding'] = coding;
      delete e.body;
      e.isBase64Encoded = false;
      return e;
    };
    const context = { awsRequestId: 'req-enc', functionName: 'edge-limiter', getRemainingTimeInMillis: () => 3000 };

    for (const coding of ['gzip', 'br'] as const) {
      it(`${coding}: the result is base64 of the origin's bytes, with Content-Encoding and Content-Length`, async () => {
        const before = originSaw.length;
        const res = await handler(event(coding), context);
        expect(originSaw.length).toBe(before + 1);
        const header = (name: string) => Object.entries(res.headers ?? {}).find(([k]) => k.toLowerCase() === name)?.[1];
        expect(res.isBase64Encoded).toBe(true);
        const body = Buffer.from(res.body, 'base64');
        expectPassedThrough(coding, { status: res.statusCode, encoding: header('content-encoding'), length: header('content-length'), body }, originSaw.at(-1));
      });
    }
  });

  describe('the Worker (wrangler deploy bundle) inside workerd, via Miniflare', () => {
    let mf: Miniflare;
    let url: string;
    beforeAll(async () => {
      const { source } = await buildWorker();
      const compatibilityDate = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync(new URL('../../wrangler.toml', import.meta.url), 'utf8'))![1]!;
      mf = new Miniflare(
        convertV4MiniflareOptions({
          modules: true,
          script: source,
          compatibilityDate,
          bindings: { LIMITER_STORE: 'memory', LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: 't', GATE_ORIGIN: originUrl },
        }),
      );
      url = (await mf.ready).toString();
    }, 120_000);
    afterAll(async () => {
      await mf?.dispose();
    });

    for (const coding of ['gzip', 'br'] as const) {
      it(`${coding}: the origin's bytes, Content-Encoding and Content-Length reach the client`, async () => {
        const { reply, saw } = await viaHttp(url, coding);
        expectPassedThrough(coding, reply, saw);
      });
    }

    it('a client that accepts no coding gets the text, and the origin is not asked for one', async () => {
      const before = originSaw.length;
      const r = await get(url, '/gzip', {});
      expect(originSaw.slice(before)).toEqual([undefined]);
      expect(r.status).toBe(200);
      expect(r.headers['content-encoding']).toBeUndefined();
      expect(r.body.toString()).toBe(TEXT);
    });
  });

  describe('where fetch decodes (Node’s fetch, no `send`), nothing claims an encoding the body no longer has', () => {
    let server: ServerType;
    let base: string;
    beforeAll(async () => {
      const config = loadConfig({ LIMITER_POLICIES: POLICIES, GATE_ORIGIN: originUrl });
      const { app } = buildApp(config, memoryStore(), { log: () => {} });
      base = await new Promise<string>((resolve) => {
        server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => resolve(`http://127.0.0.1:${info.port}`));
      });
    });
    afterAll(() => {
      server?.close();
    });

    for (const coding of ['gzip', 'br'] as const) {
      it(`${coding}: the body arrives decoded, without Content-Encoding or the encoded Content-Length`, async () => {
        const r = await get(base, `/${coding}`, { 'Accept-Encoding': coding });
        expect(r.status).toBe(200);
        expect(r.headers['content-encoding']).toBeUndefined();
        expect(r.headers['content-length']).not.toBe(String(ENCODED[coding].length));
        expect(r.body.toString()).toBe(TEXT);
      });
    }
  });
});
