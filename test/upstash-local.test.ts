// The local Upstash-compatible REST server: protocol details, checked with raw HTTP and with @upstash/redis.
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { Redis as UpstashRedis } from '@upstash/redis';
import { Ratelimit } from '@upstash/ratelimit';
import { createHash } from 'node:crypto';
import { startUpstashLocal, type UpstashLocal } from '../scripts/upstash-local/server.js';
import { startRedis } from '../scripts/lib/redis-server.js';

const TOKEN = 'upstash-local-test';
let server: UpstashLocal;
beforeAll(async () => {
  server = await startUpstashLocal({ redisUrl: inject('redisUrl'), token: TOKEN, maxBodyBytes: 64 * 1024 });
});
afterAll(() => server.close());

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
const b64 = (s: string) => Buffer.from(s).toString('base64');
const key = `ul:${Date.now()}`;

describe('local Upstash REST server', () => {
  it('POST / runs one command: {result} in plain JSON, and base64 strings with Upstash-Encoding', async () => {
    let res = await post('/', ['SET', key, 'héllo', 'PX', 60000]);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ result: 'OK' });
    res = await post('/', ['GET', key]);
    expect(await res.json()).toEqual({ result: 'héllo' });
    res = await post('/', ['GET', key], { 'Upstash-Encoding': 'base64' });
    expect(await res.json()).toEqual({ result: b64('héllo') });
    // Integers and null pass through unencoded; arrays are encoded recursively.
    expect(await (await post('/', ['STRLEN', key], { 'Upstash-Encoding': 'base64' })).json()).toEqual({ result: 6 });
    expect(await (await post('/', ['GET', `${key}:missing`], { 'Upstash-Encoding': 'base64' })).json()).toEqual({ result: null });
    const nested = await post('/', ['EVAL', "return {1, 'a', {'b', 2}, false}", '0'], { 'Upstash-Encoding': 'base64' });
    expect(await nested.json()).toEqual({ result: [1, b64('a'), [b64('b'), 2], null] });
  });

  it('a failing command answers {error} with 400, never base64-encoded', async () => {
    const res = await post('/', ['EVALSHA', 'ffffffffffffffffffffffffffffffffffffffff', '0'], { 'Upstash-Encoding': 'base64' });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: expect.stringMatching(/^NOSCRIPT/) });
  });

  it('/pipeline and /multi-exec answer per item', async () => {
    const res = await post('/pipeline', [['SET', `${key}:p`, '1'], ['INCR', `${key}:p`], ['HGET', `${key}:p`, 'x'], ['GET', `${key}:p`]], { 'Upstash-Encoding': 'base64' });
    expect(res.status).toBe(200);
    const items = (await res.json()) as { result?: unknown; error?: string }[];
    expect(items[0]).toEqual({ result: b64('OK') });
    expect(items[1]).toEqual({ result: 2 });
    expect(items[2]!.error).toMatch(/WRONGTYPE/);
    expect(items[3]).toEqual({ result: b64('2') });
    const tx = await post('/multi-exec', [['INCR', `${key}:p`], ['INCR', `${key}:p`]]);
    expect(await tx.json()).toEqual([{ result: 3 }, { result: 4 }]);
  });

  it('auth: 401 for a missing or wrong token, 400 for a malformed header', async () => {
    expect((await fetch(`${server.url}/`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '["PING"]' })).status).toBe(401);
    expect((await post('/', ['PING'], { Authorization: 'Bearer nope' })).status).toBe(401);
    const malformed = await post('/', ['PING'], { Authorization: `Token ${TOKEN}` });
    expect(malformed.status).toBe(400);
    expect(await malformed.json()).toEqual({ error: expect.stringContaining('Authorization') });
  });

  it('bad bodies get clear 4xx errors and the server keeps serving', async () => {
    expect((await post('/', ['PING'], { 'Content-Type': 'text/plain' })).status).toBe(400);
    expect((await post('/', '{not json')).status).toBe(400);
    expect(await (await post('/', { cmd: 'PING' })).json()).toEqual({ error: 'the command must be a non-empty JSON array' });
    expect((await post('/', [])).status).toBe(400);
    expect((await post('/', ['SET', { a: 1 }, 'x'])).status).toBe(400);
    expect((await post('/pipeline', ['PING'])).status).toBe(400);
    expect((await post('/pipeline', [])).status).toBe(400);
    expect((await post('/', ['SET', key, 'x'.repeat(70 * 1024)])).status).toBe(413);
    expect((await fetch(`${server.url}/`, { headers: { Authorization: `Bearer ${TOKEN}` } })).status).toBe(405);
    expect(await (await post('/', ['PING'])).json()).toEqual({ result: 'PONG' });
  });

  it('answers 500 when Redis itself is unreachable', async () => {
    const redis = await startRedis();
    const s = await startUpstashLocal({ redisUrl: redis.url, token: TOKEN });
    try {
      await redis.stop();
      const res = await fetch(`${s.url}/`, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' }, body: '["PING"]' });
      expect(res.status).toBe(500);
      expect(((await res.json()) as { error: string }).error).toMatch(/unreachable/);
    } finally {
      await s.close();
    }
  });

  it('accepts the Upstash-only shebang flag allow-key-locking, and EVALSHA by the original SHA', async () => {
    const script = `#!lua flags=allow-key-locking\nreturn redis.call('INCR', KEYS[1])`;
    const sha = createHash('sha1').update(script).digest('hex');
    expect(await (await post('/', ['EVAL', script, '1', `${key}:kl`])).json()).toEqual({ result: 1 });
    expect(await (await post('/', ['EVALSHA', sha, '1', `${key}:kl`])).json()).toEqual({ result: 2 });
    // @upstash/ratelimit's scripts declare that flag; through this server they run on plain Redis.
    const rl = new Ratelimit({ redis: new UpstashRedis({ url: server.url, token: TOKEN }), limiter: Ratelimit.tokenBucket(1, '1 s', 2), analytics: false, ephemeralCache: false, prefix: `${key}:rl` });
    expect((await rl.limit('a')).success).toBe(true);
    expect((await rl.limit('a')).success).toBe(true);
    expect((await rl.limit('a')).success).toBe(false);
  });

  it('@upstash/redis works against it with its defaults (base64 responses, auto-pipelining)', async () => {
    const client = new UpstashRedis({ url: server.url, token: TOKEN });
    await client.set(`${key}:sdk`, { a: 1, s: 'ünïcode' });
    expect(await client.get(`${key}:sdk`)).toEqual({ a: 1, s: 'ünïcode' });
    const before = server.stats.byPath['/pipeline'] ?? 0;
    const [x, y, z] = await Promise.all([client.incr(`${key}:n`), client.incr(`${key}:n`), client.incr(`${key}:n`)]);
    expect([x, y, z]).toEqual([1, 2, 3]);
    // Three concurrent commands went out as one /pipeline request.
    expect((server.stats.byPath['/pipeline'] ?? 0) - before).toBe(1);
  });
});
