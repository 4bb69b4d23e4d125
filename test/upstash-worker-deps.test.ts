// The Worker's cut @upstash/redis (scripts/build-worker-deps.mjs) against the package's own client: the
// same answers to every method the store probes for, and the same HTTP requests, byte for byte, for the
// same decisions through the Worker's store (auto-pipelined takes, NOSCRIPT recovery, reset, ping).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis as IORedis } from 'ioredis';
import { Redis as PackageRedis } from '@upstash/redis/cloudflare';
import { buildWorkerDeps, cutCommandSets, cutConfigWarnings, cutCredentialsWarning, cutJsonParseError, cutLatencyLogging, cutUrlCheck, keepMembers } from '../scripts/build-worker-deps.mjs';
import { createLimiter } from '../src/index.js';
import { adaptScriptClient, closerOf, isCluster, isTcpClient } from '../src/stores/redis-client.js';
import { createRedisStore } from '../src/stores/redis-store.js';
import { startUpstashLocal } from '../scripts/upstash-local/server.js';
import { startRedis } from '../scripts/lib/redis-server.js';

let dir: string;
let CutRedis: typeof PackageRedis;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'edge-limiter-worker-deps-'));
  CutRedis = ((await import(pathToFileURL(buildWorkerDeps(dir)).href)) as { Redis: typeof PackageRedis }).Redis;
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** As functions/app/store-edge.ts makes it. */
const client = (R: typeof PackageRedis, url: string) => new R({ url, token: 't', retry: false, signal: () => AbortSignal.timeout(5000) });

interface Sent {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: string;
}

/** The same run of decisions through the Worker's store, on a fresh redis-server: what it answered and every request it sent. */
async function run(R: typeof PackageRedis): Promise<{ answers: unknown[]; sent: Sent[] }> {
  const redis = await startRedis();
  const server = await startUpstashLocal({ redisUrl: redis.url, token: 't' });
  const admin = new IORedis(redis.url);
  const sent: Sent[] = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
    const req = new Request(input, init);
    sent.push({ url: req.url.replace(server.url, ''), method: req.method, headers: Object.fromEntries(req.headers), body: await req.clone().text() });
    return realFetch(req);
  };
  try {
    const store = createRedisStore({ client: client(R, server.url) }, adaptScriptClient);
    // policyRefreshMs at its longest: the policy-wide record is read once, before the first decision, and
    // no background reading (due once the first is half as old) lands in the run on a slow machine.
    const limiter = createLimiter({ store, policies: { p: { capacity: 3, refillPerSecond: 0.001 } }, policyRefreshMs: 60_000 });
    const answers: unknown[] = [];
    const seen = (d: { allowed: boolean; remaining?: number; reason?: string }) => answers.push([d.allowed, d.remaining, d.reason]);
    seen(await limiter.take('p', 'a')); // NOSCRIPT, then EVAL
    for (const d of await Promise.all(['a', 'a', 'b', 'c', 'a'].map((k) => limiter.take('p', k)))) seen(d); // one tick: pipelined
    await admin.script('FLUSH');
    seen(await limiter.take('p', 'b'));
    await limiter.reset('p', 'a');
    await store.ping();
    seen(await limiter.peek('p', 'a'));
    await limiter.close();
    return { answers, sent };
  } finally {
    globalThis.fetch = realFetch;
    admin.disconnect();
    await server.close();
    await redis.stop();
  }
}

describe("the Worker's cut @upstash/redis", () => {
  it('answers every probe of the store as the package does, and is a Redis client to adaptScriptClient', () => {
    const [ours, theirs] = [client(CutRedis, 'http://127.0.0.1:1'), client(PackageRedis, 'http://127.0.0.1:1')];
    for (const name of ['evalsha', 'eval', 'del', 'ping', 'takesSignal', 'call', 'sendCommand', 'getSlotMaster', 'isCluster', 'close', 'quit', 'status']) {
      expect(typeof (ours as unknown as Record<string, unknown>)[name], name).toBe(typeof (theirs as unknown as Record<string, unknown>)[name]);
    }
    expect([isTcpClient(ours), isCluster(ours), closerOf(ours), adaptScriptClient(ours).abortable]).toEqual([false, false, undefined, false]);
    expect([isTcpClient(theirs), isCluster(theirs), closerOf(theirs), adaptScriptClient(theirs).abortable]).toEqual([false, false, undefined, false]);
    // What was cut: the commands the Worker never sends.
    expect(typeof (theirs as unknown as Record<string, unknown>).get).toBe('function');
    expect((ours as unknown as Record<string, unknown>).get).toBeUndefined();
    // And Redis.fromEnv: the Worker makes its client with new Redis(...) (functions/app/store-edge.ts).
    expect([typeof PackageRedis.fromEnv, typeof CutRedis.fromEnv]).toEqual(['function', 'undefined']);
  });

  it('sends the same requests and gets the same decisions as the package, through the Worker store', async () => {
    const ours = await run(CutRedis);
    const theirs = await run(PackageRedis);
    expect(ours.answers).toEqual(theirs.answers);
    expect(ours.answers).toEqual([
      [true, 2, undefined],
      [true, 1, undefined],
      [true, 0, undefined],
      [true, 2, undefined],
      [true, 2, undefined],
      [false, 0, undefined],
      [true, 1, undefined],
      [true, 3, undefined],
    ]);
    expect(ours.sent).toEqual(theirs.sent);
    // Each command through auto-pipelining (/pipeline): first this node's policy-wide reading (the
    // override script on `el:p*`, SPEC-31 §5: the first decision waits for it; none again within
    // policyRefreshMs), then the first take, the five takes of one tick in one request (the store batches
    // them), the take after SCRIPT FLUSH, reset (the override script: it keeps a key's record), each
    // NOSCRIPT followed by EVAL, then PING and the peek.
    expect(ours.sent.map((s) => `${s.url} ${(JSON.parse(s.body) as string[][]).map((c) => `${c[0]} ${c[0] === 'evalsha' ? `${c[3]}` : ''}`.trim()).join(',')}`)).toEqual([
      '/pipeline evalsha el:p*',
      '/pipeline eval',
      '/pipeline evalsha el:p:a',
      '/pipeline eval',
      '/pipeline evalsha el:p:a',
      '/pipeline eval',
      '/pipeline evalsha el:p:b',
      '/pipeline eval',
      '/pipeline evalsha el:p:a',
      '/pipeline eval',
      '/pipeline ping',
      '/pipeline evalsha el:p:a',
    ]);
  });

  it('stops the build, writing nothing, when a class is not of the shape it knows or lacks a kept member', () => {
    const cls = (body: string) => `var Redis = class {\n${body}\n};\n`;
    expect(keepMembers(cls('  a;\n  b = () => 1;\n  /**\n   * c\n   */\n  c = () => {\n    return 2;\n  };'), 'Redis', ['a', 'c'])).toBe(cls('  a;\n  /**\n   * c\n   */\n  c = () => {\n    return 2;\n  };'));
    expect(() => keepMembers(cls('  a;'), 'Redis', ['a', 'evalsha'])).toThrow(/Redis has no evalsha/);
    expect(() => keepMembers(cls('  a;\n\tb = 1;'), 'Redis', ['a'])).toThrow(/a line of a shape/);
    expect(() => keepMembers(cls('  a;') + cls('  a;'), 'Redis', ['a'])).toThrow(/not one/);
    // A class that extends another, as cloudflare.mjs's Redis does.
    const sub = 'var Redis2 = class _Redis extends Redis {\n  constructor() {\n    super();\n  }\n  static fromEnv() {\n    return 1;\n  }\n};\n';
    expect(keepMembers(sub, 'Redis2', ['constructor'])).toBe('var Redis2 = class _Redis extends Redis {\n  constructor() {\n    super();\n  }\n};\n');
  });

  it('cuts the constructor\'s four url and token warnings (env.ts refuses those values) and nothing else, or stops the build', () => {
    const warn = (what: string) => `      console.warn(\n        "${what}"\n      );\n`;
    const ctor = (extra = '') =>
      `  constructor(config, env) {\n    if (!config.url) {\n${warn('u')}    } else if (config.url.startsWith(" ")) {\n${warn('uw')}    }\n    if (!config.token) {\n${warn('t')}    } else if (bad) {\n${extra}      console.warn(\n        "[Upstash Redis] The redis token contains whitespace or newline, which can cause errors!"\n      );\n    }\n    const client = 1;\n  }\n`;
    expect(cutConfigWarnings(ctor())).toBe('  constructor(config, env) {\n    const client = 1;\n  }\n');
    expect(() => cutConfigWarnings(ctor(warn('x')))).toThrow(/not one set of url and token warnings/);
    expect(() => cutConfigWarnings(ctor() + ctor())).toThrow(/not one set/);
    expect(() => cutConfigWarnings(ctor().replace('if (!config.token)', 'if (!config.tok)'))).toThrow(/not one set/);
  });

  it('cuts the auto-pipeline\'s two command-name sets to the members kept, and nothing else, or stops the build', () => {
    const set = (name: string, lines: string[]) => `var ${name} = /* @__PURE__ */ new Set([\n${lines.join('\n')}\n]);\n`;
    const names = (n: number) => Array.from({ length: n }, (_, i) => `  "c${i}",`);
    const code = `a\n${set('READ_COMMANDS', ['  // Array', ...names(12), '  "ping",', '  "json.get"'])}${set('EXCLUDE_COMMANDS', [...names(10), '  "exec"'])}b\n`;
    expect(cutCommandSets(code, ['ping', 'exec', 'evalsha'])).toBe(`a\n${set('READ_COMMANDS', ['  "ping"'])}${set('EXCLUDE_COMMANDS', ['  "exec"'])}b\n`);
    expect(() => cutCommandSets(code.replace('"c3",', 'c3,'), ['ping'])).toThrow(/not one READ_COMMANDS/);
    expect(() => cutCommandSets(code + set('EXCLUDE_COMMANDS', names(10)), ['ping'])).toThrow(/not one EXCLUDE_COMMANDS/);
    expect(() => cutCommandSets(`a\n${set('READ_COMMANDS', names(12))}`, ['ping'])).toThrow(/not one EXCLUDE_COMMANDS/);
  });

  it('cuts the request\'s warning for a client without url or token (env.ts refuses those), or stops the build', () => {
    const warn = '    if (!this.hasCredentials) {\n      console.warn(\n        "[Upstash Redis] Redis client was initialized without url or token. Failed to execute command."\n      );\n    }\n';
    expect(cutCredentialsWarning(`a\n${warn}b\n`)).toBe('a\nb\n');
    expect(() => cutCredentialsWarning('a\nb\n')).toThrow(/not one credentials warning/);
    expect(() => cutCredentialsWarning(`${warn}${warn}`)).toThrow(/not one credentials warning/);
  });

  it('cuts the url check and its UrlError (env.ts checks the url at startup), and nothing else, or stops the build', () => {
    const exports = 'var error_exports = {};\n__export(error_exports, {\n  UpstashError: () => UpstashError,\n  UrlError: () => UrlError\n});\n';
    const cls = 'var UrlError = class extends Error {\n  constructor(url) {\n    super(\n      `Upstash Redis client was passed an invalid URL. You should pass a URL starting with https. Received: "${url}". `\n    );\n    this.name = "UrlError";\n  }\n};\n';
    const check = '    const urlRegex = /^https?:\\/\\/[^\\s#$./?].\\S*$/;\n    if (this.baseUrl && !urlRegex.test(this.baseUrl)) {\n      throw new UrlError(this.baseUrl);\n    }\n';
    const code = `${exports}${cls}a\n${check}b\n`;
    expect(cutUrlCheck(code)).toBe('var error_exports = {};\n__export(error_exports, {\n  UpstashError: () => UpstashError\n});\na\nb\n');
    expect(() => cutUrlCheck(code.replace(check, ''))).toThrow(/not one url check/);
    expect(() => cutUrlCheck(`${code}throw new UrlError(1);\n`)).toThrow(/not one url check/);
  });

  it('makes the JSON parse error an UpstashError with the body\'s first 200 characters, and nothing else, or stops the build', () => {
    const exports = 'var error_exports = {};\n__export(error_exports, {\n  UpstashError: () => UpstashError,\n  UpstashJSONParseError: () => UpstashJSONParseError\n});\n';
    const cls = 'var UpstashJSONParseError = class extends UpstashError {\n  constructor(body, options) {\n    const truncatedBody = body.length > 200 ? body.slice(0, 200) + "..." : body;\n    super(`Unable to parse response body: ${truncatedBody}`, options);\n    this.name = "UpstashJSONParseError";\n  }\n};\n';
    const throws = '        throw new UpstashJSONParseError(rawBody2, { cause: error2 });\n      throw new UpstashJSONParseError(rawBody, { cause: error2 });\n';
    expect(cutJsonParseError(`${exports}${cls}${throws}`)).toBe('var error_exports = {};\n__export(error_exports, {\n  UpstashError: () => UpstashError\n});\n        throw new UpstashError(rawBody2.slice(0, 200), { cause: error2 });\n      throw new UpstashError(rawBody.slice(0, 200), { cause: error2 });\n');
    expect(() => cutJsonParseError(`${exports}${cls}`)).toThrow(/not one JSON parse error/);
    expect(() => cutJsonParseError(`${exports}${cls}${throws}new UpstashJSONParseError(1);\n`)).toThrow(/not one JSON parse error/);
  });

  it('cuts the two latency-logging wrappers and nothing else, or stops the build', () => {
    const wrap = (cond: string) => `    if (${cond}) {\n      this.exec = async () => {\n        console.log(\`Latency for \${1}\`);\n      };\n    }\n`;
    const code = `a\n${wrap('opts?.latencyLogging')}b\n${wrap('this.commandOptions?.latencyLogging')}c\n`;
    expect(cutLatencyLogging(code)).toBe('a\nb\nc\n');
    expect(() => cutLatencyLogging(`a\n${wrap('opts?.latencyLogging')}`)).toThrow(/not one latency-logging branch/);
    expect(() => cutLatencyLogging(code.replaceAll('Latency for', 'Took'))).toThrow(/not one latency-logging branch/);
    expect(() => cutLatencyLogging(code + wrap('opts?.latencyLogging'))).toThrow(/not one latency-logging branch/);
  });
});
