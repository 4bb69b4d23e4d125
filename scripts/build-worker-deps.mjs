// The Worker's @upstash/redis, without the command methods it never calls: wrangler.toml runs this before
// every bundle ([build]) and points `@upstash/redis/cloudflare` at its output ([alias]). It also writes
// the Worker's hono/hono-base without its deprecated mount() (buildWorkerHono below), the Worker's static assets (the OpenAPI document; buildWorkerAssets below), and the source the Worker is
// bundled from, its Lua without indentation (buildWorkerSource below).
//
// Why: the package's Redis and Pipeline classes hold one instance field per Redis command (about 190
// each), so no bundler can drop a command the Worker never sends, and the package has no narrower entry
// point (its exports are the node, cloudflare and fastly builds, each of the whole client). Those fields
// were 76 KB of the Worker's 200 KB and 17 KiB of its 60 KiB gzip. The Worker calls evalsha, eval, del
// and ping, through the auto-pipelining proxy (createAutoPipelineProxy, which reads the same method on a
// Pipeline); the store's adapters also probe the client for other methods by name (call, sendCommand,
// getSlotMaster, close, quit: src/stores/redis-client.ts), none of which the class has.
//
// What it writes, into build/worker/upstash-redis/: the installed package's cloudflare.mjs, its Redis
// class cut to its constructor (KEEP_ENTRY: no Redis.fromEnv, which the Worker never calls), and its
// chunk with the Redis and Pipeline class bodies cut to the members in KEEP, and its HTTP client's branch
// for event streams (SUBSCRIBE's replies) and its latency logging cut out (cutEventStream,
// cutLatencyLogging), its auto-pipelining's command-name sets cut to the members kept (cutCommandSets),
// its warning for a client without credentials (cutCredentialsWarning), its check of the url's form
// (cutUrlCheck), its JSON parse error class (cutJsonParseError), and its Redis constructor's warnings about the url and token, which
// functions/app/env.ts refuses at startup (cutConfigWarnings). Everything else is the package's
// code byte for byte (the rest of its HTTP client, the commands it still names, auto-pipelining, errors, telemetry),
// and the bundler drops the command classes nothing names any more. A class body of a shape it does not
// know, or a kept member it cannot find, stops the build with an error: it never writes a guess.
// test/upstash-worker-deps.test.ts checks that the cut client answers every probe as the package's does.
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The members each class keeps: its state and plumbing, and the four commands the Worker sends. */
export const KEEP = {
  Redis: ['client', 'opts', 'enableTelemetry', 'enableAutoPipelining', 'constructor', 'readYourWritesSyncToken', 'use', 'addTelemetry', 'pipeline', 'autoPipeline', 'multi', 'evalsha', 'eval', 'del', 'ping'],
  Pipeline: ['client', 'commands', 'commandOptions', 'multiExec', 'constructor', 'exec', 'length', 'chain', 'evalsha', 'eval', 'del', 'ping'],
};

/** The members cloudflare.mjs's Redis class keeps: the Worker makes its client with `new Redis(...)`, never `Redis.fromEnv`. */
export const KEEP_ENTRY = { Redis2: ['constructor'] };

/**
 * The class `var <name> = class {` (or `class <Name> extends <Base> {`) of a bundled module with only the
 * members named in `keep`. Members are read from the tsup build's layout: each starts on a line indented
 * two spaces (a field, a method, get/set, or the comment before one) and continues on deeper lines.
 * Throws on any other line.
 */
export function keepMembers(code, name, keep) {
  const heads = [...code.matchAll(new RegExp(`var ${name} = class(?: [\\w$]+ extends [\\w$]+)? \\{\\n`, 'g'))];
  if (heads.length !== 1) throw new Error(`[build-worker-deps] @upstash/redis: not one "var ${name} = class"`);
  const bodyStart = heads[0].index + heads[0][0].length;
  const end = code.indexOf('\n};\n', bodyStart);
  const members = [];
  let comment = [];
  let member;
  let inComment = false;
  for (const line of code.slice(bodyStart, end).split('\n')) {
    if (inComment) {
      comment.push(line);
      inComment = !line.includes('*/');
    } else if (/^ {2}\/[*/]/.test(line)) {
      member = undefined;
      comment.push(line);
      inComment = line.startsWith('  /*') && !line.includes('*/');
    } else if (/^ {2}(?:(?:static|async|get|set) )*[A-Za-z_$][\w$]*\s*(?:[=(;]|$)/.test(line)) {
      const id = /^ {2}(?:(?:static|async|get|set) )*([A-Za-z_$][\w$]*)/.exec(line)[1];
      member = { id, lines: [...comment, line] };
      members.push(member);
      comment = [];
    } else if (member && /^( {3}| {2}[})\]]|$)/.test(line)) {
      member.lines.push(line);
    } else {
      throw new Error(`[build-worker-deps] @upstash/redis: ${name} has a line of a shape this script does not know: ${JSON.stringify(line)}`);
    }
  }
  const missing = keep.filter((k) => !members.some((m) => m.id === k));
  if (missing.length) throw new Error(`[build-worker-deps] @upstash/redis: ${name} has no ${missing.join(', ')}`);
  const kept = members.filter((m) => keep.includes(m.id)).flatMap((m) => m.lines);
  return code.slice(0, bodyStart) + kept.join('\n') + code.slice(end);
}

/**
 * The HttpClient's request without its event-stream branch (the replies of SUBSCRIBE and its kind,
 * read line by line as they come; the Worker sends none of those commands): the branch, from its `if`
 * to the `return { result: 1 };` that ends it, exactly as the package has it, or an error.
 */
export function cutEventStream(code) {
  const head = '    if (isEventStream && req && req.onMessage && res.body) {\n';
  const tail = '      return { result: 1 };\n    }\n';
  const start = code.indexOf(head);
  const end = code.indexOf(tail, start);
  if (start < 0 || end < 0 || code.indexOf(head, start + 1) >= 0 || !code.slice(start, end).includes('req.onMessage?.(data)')) {
    throw new Error('[build-worker-deps] @upstash/redis: not one event-stream branch of the shape this script knows');
  }
  return code.slice(0, start) + code.slice(end + tail.length);
}

/**
 * The code with the package's two latency-logging wrappers cut out (a command's and a pipeline's
 * constructor: `if (<options>.latencyLogging) { ... }`, each wrapping exec to print its time). They run
 * only when the client is made with `latencyLogging`, which functions/app/store-edge.ts never sets.
 * Exactly these two, each printing "Latency for", or the build stops.
 */
export function cutLatencyLogging(code) {
  for (const head of ['    if (opts?.latencyLogging) {\n', '    if (this.commandOptions?.latencyLogging) {\n']) {
    const start = code.indexOf(head);
    const end = code.indexOf('\n    }\n', start);
    if (start < 0 || end < 0 || code.indexOf(head, start + 1) >= 0 || !code.slice(start, end).includes('Latency for')) {
      throw new Error('[build-worker-deps] @upstash/redis: not one latency-logging branch of the shape this script knows');
    }
    code = code.slice(0, start) + code.slice(end + '\n    }\n'.length);
  }
  return code;
}

/**
 * The auto-pipelining proxy's two command-name sets (READ_COMMANDS, which pipeline a command joins, and
 * EXCLUDE_COMMANDS, which it never pipelines) cut to the names `names` of them: it looks a name up only
 * for a member of the cut classes (a function of the Pipeline, or a member of Redis), so for every other
 * name it answers as before, and for these it finds what it found. About 1 KB of the bundle.
 */
export function cutCommandSets(code, names) {
  for (const set of ['READ_COMMANDS', 'EXCLUDE_COMMANDS']) {
    const head = `var ${set} = /* @__PURE__ */ new Set([\n`;
    const start = code.indexOf(head);
    const end = code.indexOf('\n]);\n', start);
    const body = code.slice(start + head.length, end);
    const entries = [...body.matchAll(/^ {2}"([\w.]+)",?$/gm)].map((m) => m[1]);
    const rest = body.split('\n').filter((l) => !/^ {2}"[\w.]+",?$/.test(l) && !/^ {2}\/\/ /.test(l) && l.trim() !== '');
    if (start < 0 || end < 0 || code.indexOf(head, start + 1) >= 0 || entries.length < 10 || rest.length > 0) {
      throw new Error(`[build-worker-deps] @upstash/redis: not one ${set} of the shape this script knows`);
    }
    const kept = entries.filter((e) => names.includes(e)).map((e) => `  ${JSON.stringify(e)}`);
    code = code.slice(0, start + head.length) + kept.join(',\n') + code.slice(end);
  }
  return code;
}

/**
 * cloudflare.mjs's Redis constructor without its four warnings about the url and token (missing, or with
 * whitespace or a line break): functions/app/env.ts refuses each of those at startup, naming the
 * variable, so none can print in the Worker. Exactly these, or the build stops.
 */
export function cutConfigWarnings(code) {
  const head = '  constructor(config, env) {\n    if (!config.url) {\n';
  const tail = '"[Upstash Redis] The redis token contains whitespace or newline, which can cause errors!"\n      );\n    }\n';
  const start = code.indexOf(head);
  const end = code.indexOf(tail, start);
  const cut = code.slice(start + head.length - '    if (!config.url) {\n'.length, end + tail.length);
  if (start < 0 || end < 0 || code.indexOf(head, start + 1) >= 0 || cut.split('console.warn(').length !== 5 || !cut.includes("if (!config.token) {")) {
    throw new Error('[build-worker-deps] @upstash/redis: not one set of url and token warnings of the shape this script knows');
  }
  return code.replace(cut, '');
}

/**
 * The HTTP client's constructor without its check of the url's form, and the UrlError it throws (no
 * longer in `errors`, which the Worker does not import): functions/app/env.ts refuses at startup a url
 * that is no http(s) URL, and a url it takes that the check would refuse (a host starting with "$" or
 * ".", an upper-case scheme) fails the client's first call with a StoreError instead. Exactly these, or
 * the build stops.
 */
export function cutUrlCheck(code) {
  const parts = [
    '    const urlRegex = /^https?:\\/\\/[^\\s#$./?].\\S*$/;\n    if (this.baseUrl && !urlRegex.test(this.baseUrl)) {\n      throw new UrlError(this.baseUrl);\n    }\n',
    ',\n  UrlError: () => UrlError\n',
    'var UrlError = class extends Error {\n  constructor(url) {\n    super(\n      `Upstash Redis client was passed an invalid URL. You should pass a URL starting with https. Received: "${url}". `\n    );\n    this.name = "UrlError";\n  }\n};\n',
  ];
  for (const [i, part] of parts.entries()) {
    const at = code.indexOf(part);
    if (at < 0 || code.indexOf(part, at + 1) >= 0) throw new Error('[build-worker-deps] @upstash/redis: not one url check of the shape this script knows');
    code = code.slice(0, at) + (i === 1 ? '\n' : '') + code.slice(at + part.length);
  }
  if (code.includes('UrlError')) throw new Error('[build-worker-deps] @upstash/redis: not one url check of the shape this script knows');
  return code;
}

/**
 * The HTTP client's UpstashJSONParseError (a reply body that is no JSON) made its UpstashError, with
 * the body's first 200 characters as its message (the package's adds "Unable to parse response body:"
 * and "..."); the class goes, and from `errors`, which the Worker does not import. Either is a failed
 * store call to the limiter. Exactly these, or the build stops.
 */
export function cutJsonParseError(code) {
  const cls = 'var UpstashJSONParseError = class extends UpstashError {\n  constructor(body, options) {\n    const truncatedBody = body.length > 200 ? body.slice(0, 200) + "..." : body;\n    super(`Unable to parse response body: ${truncatedBody}`, options);\n    this.name = "UpstashJSONParseError";\n  }\n};\n';
  const parts = [[',\n  UpstashJSONParseError: () => UpstashJSONParseError\n', '\n'], [cls, ''], ['throw new UpstashJSONParseError(rawBody2, { cause: error2 });', 'throw new UpstashError(rawBody2.slice(0, 200), { cause: error2 });'], ['throw new UpstashJSONParseError(rawBody, { cause: error2 });', 'throw new UpstashError(rawBody.slice(0, 200), { cause: error2 });']];
  for (const [part, by] of parts) {
    const at = code.indexOf(part);
    if (at < 0 || code.indexOf(part, at + 1) >= 0) throw new Error('[build-worker-deps] @upstash/redis: not one JSON parse error of the shape this script knows');
    code = code.slice(0, at) + by + code.slice(at + part.length);
  }
  if (code.includes('UpstashJSONParseError')) throw new Error('[build-worker-deps] @upstash/redis: not one JSON parse error of the shape this script knows');
  return code;
}

/**
 * The HTTP client's request without its warning for a client made without url or token: the Worker
 * makes its client only with both (functions/app/env.ts refuses either missing at startup). Exactly
 * this one, or the build stops.
 */
export function cutCredentialsWarning(code) {
  const warn = '    if (!this.hasCredentials) {\n      console.warn(\n        "[Upstash Redis] Redis client was initialized without url or token. Failed to execute command."\n      );\n    }\n';
  const at = code.indexOf(warn);
  if (at < 0 || code.indexOf(warn, at + 1) >= 0) throw new Error('[build-worker-deps] @upstash/redis: not one credentials warning of the shape this script knows');
  return code.slice(0, at) + code.slice(at + warn.length);
}

/** Writes the cut package into `outDir` and returns the path of its cloudflare.mjs. */
export function buildWorkerDeps(outDir) {
  // The import condition's file (cloudflare.mjs), as the bundler resolves it.
  const entryPath = fileURLToPath(import.meta.resolve('@upstash/redis/cloudflare'));
  const pkgDir = dirname(entryPath);
  const entry = readFileSync(entryPath, 'utf8');
  const chunkName = /from "\.\/(chunk-[\w-]+\.mjs)"/.exec(entry)?.[1];
  if (!chunkName) throw new Error('[build-worker-deps] @upstash/redis: cloudflare.mjs imports no chunk');
  let chunk = readFileSync(join(pkgDir, chunkName), 'utf8');
  for (const [name, keep] of Object.entries(KEEP)) chunk = keepMembers(chunk, name, keep);
  chunk = cutJsonParseError(cutUrlCheck(cutCredentialsWarning(cutCommandSets(cutLatencyLogging(cutEventStream(chunk)), [...new Set(Object.values(KEEP).flat())]))));
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, 'chunk.mjs'), `// @upstash/redis ${chunkName}, its Redis and Pipeline classes cut by scripts/build-worker-deps.mjs.\n${chunk}`);
  const out = join(outDir, 'cloudflare.mjs');
  let cut = entry.replace(`"./${chunkName}"`, '"./chunk.mjs"');
  for (const [name, keep] of Object.entries(KEEP_ENTRY)) cut = keepMembers(cut, name, keep);
  cut = cutConfigWarnings(cut);
  writeFileSync(out, cut);
  return out;
}

/**
 * Hono's HonoBase module without its deprecated `mount()` method (hono-base.js: "Use `mount()` from
 * `hono/mount` instead. `.mount()` will be removed in v5"). The Worker never mounts an application, but
 * a class's methods are never dropped by a bundler, and this one imports the request rewriting of
 * utils/mount.js and helper/route: 1,084 bytes of the Worker's 60 KiB gzip. Cut: the method with its doc
 * comment, and the two imports only it used. Each piece must be there once, in the shape of hono 4's
 * build, the span cut must hold that comment and that method and nothing else, and the class must keep
 * every other member it had, or the build stops.
 */
export function cutHonoMount(code) {
  const once = (text, what) => {
    const at = code.indexOf(text);
    if (at < 0 || code.indexOf(text, at + 1) >= 0) throw new Error(`[build-worker-deps] hono: not one ${what} of the shape this script knows`);
    return at;
  };
  const doc = once('\t/**\n\t* `.mount()` allows you to mount', 'doc comment of mount()');
  const method = once('\n\tmount(path, applicationHandler, options) {\n', 'mount() method');
  const next = once('\n\t#addRoute(method, path, handler, baseRoutePath) {', '#addRoute after mount()');
  // What goes is exactly the doc comment, then the method: its body lines indented deeper, up to its
  // closing brace, then #addRoute. Anything else there (a member hono adds) stops the build.
  const span = code.slice(doc, next + 1);
  const commentEnd = span.indexOf('\t*/\n') + '\t*/\n'.length;
  const body = span.slice(commentEnd).split('\n').slice(1, -2);
  if (!(doc < method && method < next) || doc + commentEnd !== method + 1 || !span.endsWith('\n\t}\n') || !body.every((line) => line === '' || line.startsWith('\t\t'))) {
    throw new Error('[build-worker-deps] hono: mount() is not one doc comment and one method right before #addRoute');
  }
  let cut = code.slice(0, doc) + code.slice(next + 1);
  for (const line of ['import { createMountedRequest } from "./utils/mount.js";\n', 'import { routePath } from "./helper/route/index.js";\n']) {
    const at = cut.indexOf(line);
    if (at < 0) throw new Error(`[build-worker-deps] hono: no ${JSON.stringify(line.trim())}`);
    cut = cut.slice(0, at) + cut.slice(at + line.length);
  }
  if (/\bcreateMountedRequest\b|\broutePath\b|\bmount\(/.test(cut)) throw new Error('[build-worker-deps] hono: HonoBase still uses what mount() used');
  // And every other member of the class is still there.
  const members = (text) => [...text.matchAll(/^\t(?:(?:static|async|get|set) )*(#?[A-Za-z_$][\w$]*)\s*(?:[=(;]|$)/gm)].map((m) => m[1]);
  const before = members(code).filter((m) => m !== 'mount');
  if (JSON.stringify(members(cut)) !== JSON.stringify(before)) throw new Error('[build-worker-deps] hono: the cut lost a member of HonoBase other than mount()');
  return cut;
}

/**
 * Writes the Worker's `hono/hono-base` into `outDir` (wrangler.toml's [alias]) and returns its path: the
 * installed package's hono-base.js cut by cutHonoMount, its relative imports pointed at the package's own
 * files, so that every other module of hono (Context, HTTPException, the routers) is the package's, once.
 */
export function buildWorkerHono(outDir) {
  const basePath = fileURLToPath(import.meta.resolve('hono/hono-base'));
  const dist = dirname(basePath);
  const code = cutHonoMount(readFileSync(basePath, 'utf8')).replace(/from "\.\/([^"]+)"/g, (_, rel) => `from ${JSON.stringify(relative(outDir, join(dist, rel)).split(sep).join('/'))}`);
  const out = join(outDir, 'hono-base.mjs');
  const text = `// hono/hono-base without its deprecated mount(), cut by scripts/build-worker-deps.mjs.\n${code}`;
  if (existsSync(out) && readFileSync(out, 'utf8') === text) return out;
  mkdirSync(outDir, { recursive: true });
  // (Written whole: parallel builds, as buildWorkerSource.)
  const tmp = `${out}.${process.pid}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, out);
  return out;
}

/**
 * Writes the Worker's static assets into `outDir` (wrangler.toml's [assets]): the permit API's OpenAPI
 * document at v1/openapi.json, with its Cache-Control in _headers. Served by the platform before the
 * Worker runs, it is no part of the Worker's bundle (its builder was 8 KiB of the 60 KiB gzip budget).
 */
export function buildWorkerAssets(outDir) {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..');
  mkdirSync(join(outDir, 'v1'), { recursive: true });
  writeFileSync(join(outDir, 'v1/openapi.json'), readFileSync(join(root, 'openapi.json')));
  writeFileSync(join(outDir, '_headers'), '/v1/openapi.json\n  Cache-Control: public, max-age=300\n');
}

/** The modules whose template text is Lua: the Redis scripts' sources. */
export const LUA_SOURCE = /^redis-.*\.ts$/;

/**
 * Writes the source the Worker is bundled from into `outDir` (wrangler.toml's main): functions/ and src/
 * as they are, but for the Redis scripts' modules (src/stores, LUA_SOURCE), whose lines lose their
 * indentation. Outside template literals indentation means nothing to TypeScript, and inside them these
 * modules hold only Lua, which needs none: each script is sent flushed (src/stores/redis-lua.ts flush),
 * so it is the same text, with the same SHA1, as the one Node runs. The indentation was 385 bytes of the
 * Worker's 60 KiB gzip budget: gzip stores a run of spaces after each of some thousand lines.
 */
export function buildWorkerSource(outDir) {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..');
  // Several builds may run at once (wrangler dev and a dry run in parallel tests): each file is written
  // whole (a temporary file renamed over it) and only when it differs, nothing is ever removed first, and
  // every build writes the same bytes.
  const wanted = new Set();
  const copy = (rel) => {
    const from = join(root, rel);
    if (statSync(from).isDirectory()) {
      for (const name of readdirSync(from)) copy(join(rel, name));
      return;
    }
    const to = join(outDir, rel);
    wanted.add(to);
    let text = readFileSync(from, 'utf8');
    if (rel.startsWith(join('src', 'stores')) && LUA_SOURCE.test(basename(rel))) text = text.replace(/\n +/g, '\n');
    if (existsSync(to) && readFileSync(to, 'utf8') === text) return;
    mkdirSync(dirname(to), { recursive: true });
    const tmp = `${to}.${process.pid}.tmp`;
    writeFileSync(tmp, text);
    renameSync(tmp, to);
  };
  for (const dir of ['functions', 'src']) copy(dir);
  // A file gone from the source goes from the copy.
  const prune = (dir) => {
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir)) {
      // (Another build's temporary file, about to be renamed: not this build's to stat or remove.)
      if (name.endsWith('.tmp')) continue;
      const p = join(dir, name);
      let isDir;
      try {
        isDir = statSync(p).isDirectory();
      } catch {
        continue;
      }
      if (isDir) prune(p);
      else if (!wanted.has(p)) rmSync(p, { force: true });
    }
  };
  for (const dir of ['functions', 'src']) prune(join(outDir, dir));
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const build = join(dirname(fileURLToPath(import.meta.url)), '../build/worker');
  buildWorkerDeps(join(build, 'upstash-redis'));
  buildWorkerHono(join(build, 'hono'));
  buildWorkerAssets(join(build, 'assets'));
  buildWorkerSource(join(build, 'app'));
}
