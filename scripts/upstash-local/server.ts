// A local server that speaks the Upstash Redis REST protocol in front of a real Redis over TCP, so that
// @upstash/redis (and our Worker) can run against real Redis here. Dev tooling in the spirit of SRH,
// not a mock: every command is executed by Redis.
//
// Protocol: POST / with a JSON array command; POST /pipeline and POST /multi-exec with a 2-D array.
// Replies: {"result": ...} (200) or {"error": "..."} (400 on a command error, 500 when Redis is
// unreachable); /pipeline and /multi-exec reply with an array of {result}|{error}. With the request
// header `Upstash-Encoding: base64`, every string in a result is base64 (recursively in arrays);
// numbers and null pass through; errors are never encoded. Auth: `Authorization: Bearer <token>`.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Redis } from 'ioredis';
import { ScriptShaMap } from './script-compat.js';

export interface UpstashLocalOptions {
  /** The Redis to forward to. @default REDIS_URL or redis://127.0.0.1:6379 */
  redisUrl?: string;
  /** The bearer token clients must send. */
  token: string;
  /** @default 0 (a free port) */
  port?: number;
  /** @default 127.0.0.1 */
  host?: string;
  /** Largest request body, in bytes. @default 1 MiB */
  maxBodyBytes?: number;
}

export interface UpstashLocal {
  url: string;
  token: string;
  port: number;
  /** Requests served, per path. */
  readonly stats: { requests: number; byPath: Record<string, number> };
  close(): Promise<void>;
}

type Reply = { result: unknown } | { error: string };

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function encodeResult(value: unknown, base64: boolean): unknown {
  if (Buffer.isBuffer(value)) return base64 ? value.toString('base64') : value.toString('utf8');
  if (typeof value === 'string') return base64 ? Buffer.from(value).toString('base64') : value;
  if (Array.isArray(value)) return value.map((v) => encodeResult(v, base64));
  return value ?? null;
}

function toArgs(command: unknown, where: string, scripts: ScriptShaMap): string[] {
  if (!Array.isArray(command) || command.length === 0) throw new HttpError(400, `${where} must be a non-empty JSON array`);
  const args = command.map((a, i) => {
    if (typeof a === 'string') return a;
    if (typeof a === 'number' && Number.isFinite(a)) return String(a);
    if (typeof a === 'boolean') return a ? '1' : '0';
    throw new HttpError(400, `${where}[${i}] must be a string or a number`);
  });
  // Upstash-only script flags (see script-compat.ts): strip them, and map SHAs accordingly.
  const name = args[0]!.toUpperCase();
  if ((name === 'EVAL' || name === 'EVAL_RO') && args[1] !== undefined) args[1] = scripts.script(args[1]);
  else if ((name === 'EVALSHA' || name === 'EVALSHA_RO') && args[1] !== undefined) args[1] = scripts.sha(args[1]);
  else if (name === 'SCRIPT' && args[1]?.toUpperCase() === 'LOAD' && args[2] !== undefined) args[2] = scripts.script(args[2]);
  return args;
}

/** A Redis reply error (the command ran and failed) as opposed to a connection problem. */
function isReplyError(err: unknown): boolean {
  return (err as { name?: string })?.name === 'ReplyError';
}

async function readBody(req: IncomingMessage, max: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > max) throw new HttpError(413, `request body is larger than ${max} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export async function startUpstashLocal(options: UpstashLocalOptions): Promise<UpstashLocal> {
  if (!options.token) throw new Error('[edge-limiter] [upstash-local] a token is required');
  const redisUrl = options.redisUrl ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const maxBody = options.maxBodyBytes ?? 1024 * 1024;
  // No offline queue and one attempt per command: when Redis is down, requests fail at once with 500.
  const redis = new Redis(redisUrl, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    connectTimeout: 2000,
    retryStrategy: (times) => Math.min(times * 50, 250),
  });
  redis.on('error', () => {});
  // Give Redis a moment to connect, so the first requests do not fail for want of a connection; a Redis
  // that is down now is not fatal (requests answer 500 until it is back).
  await new Promise<void>((resolve) => {
    const t = setTimeout(resolve, 2000);
    redis.once('ready', () => {
      clearTimeout(t);
      resolve();
    });
  });
  const stats = { requests: 0, byPath: {} as Record<string, number> };
  const scripts = new ScriptShaMap();

  async function single(args: string[]): Promise<Reply> {
    try {
      return { result: await redis.callBuffer(args[0]!, ...args.slice(1)) };
    } catch (err) {
      if (isReplyError(err)) return { error: (err as Error).message };
      throw new HttpError(500, `Redis is unreachable: ${(err as Error).message}`);
    }
  }

  async function batch(commands: string[][], atomic: boolean): Promise<Reply[]> {
    const p = atomic ? redis.multi() : redis.pipeline();
    for (const c of commands) p.callBuffer(c[0]!, ...c.slice(1));
    let results: [Error | null, unknown][] | null;
    try {
      results = await p.exec();
    } catch (err) {
      if (atomic && isReplyError(err)) {
        // EXECABORT: a command was rejected while queueing; report it for every item.
        return commands.map(() => ({ error: (err as Error).message }));
      }
      throw new HttpError(500, `Redis is unreachable: ${(err as Error).message}`);
    }
    if (!results) throw new HttpError(500, 'the transaction was aborted');
    return results.map(([err, value]) => {
      if (err && !isReplyError(err)) throw new HttpError(500, `Redis is unreachable: ${err.message}`);
      return err ? { error: err.message } : { result: value };
    });
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const send = (status: number, body: unknown) => {
      const text = JSON.stringify(body);
      res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
      res.end(text);
    };
    try {
      const path = (req.url ?? '/').split('?')[0]!;
      stats.requests++;
      stats.byPath[path] = (stats.byPath[path] ?? 0) + 1;
      if (req.method !== 'POST') throw new HttpError(405, 'only POST is supported');
      const auth = req.headers.authorization;
      if (!auth) throw new HttpError(401, 'Unauthorized');
      const m = /^Bearer ([^\s]+)$/.exec(auth);
      if (!m) throw new HttpError(400, 'malformed Authorization header: expected "Bearer <token>"');
      if (m[1] !== options.token) throw new HttpError(401, 'Unauthorized');
      const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
      if (type !== 'application/json') throw new HttpError(400, 'Content-Type must be application/json');
      const text = await readBody(req, maxBody);
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        throw new HttpError(400, 'the body is not valid JSON');
      }
      const base64 = String(req.headers['upstash-encoding'] ?? '').toLowerCase() === 'base64';
      const encode = (r: Reply): Reply => ('error' in r ? r : { result: encodeResult(r.result, base64) });
      if (path === '/' || path === '') {
        const reply = await single(toArgs(body, 'the command', scripts));
        return send('error' in reply ? 400 : 200, encode(reply));
      }
      if (path === '/pipeline' || path === '/multi-exec') {
        if (!Array.isArray(body) || body.length === 0) throw new HttpError(400, 'the body must be a non-empty JSON array of commands');
        const commands = body.map((c, i) => toArgs(c, `command ${i}`, scripts));
        const replies = await batch(commands, path === '/multi-exec');
        return send(200, replies.map(encode));
      }
      throw new HttpError(404, `no such endpoint ${path.slice(0, 64)}`);
    } catch (err) {
      if (err instanceof HttpError) return send(err.status, { error: err.message });
      send(500, { error: `internal error: ${(err as Error).message}` });
    }
  }

  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://${options.host ?? '127.0.0.1'}:${port}`,
    token: options.token,
    port,
    stats,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      redis.disconnect();
    },
  };
}
