// Where the middleware's HTTP cost goes, against floors and peers: `node --import tsx bench/middleware-ab.ts [options] <mode>...`
// Options: --rounds N (default 9); --requests N (rawLoad requests per run, default 30000; 0 skips
// rawLoad); --seconds S (autocannon seconds per run, default 3; 0 skips autocannon); --bases a,b (the
// modes every other is divided by; default none, hono-rate-limiter and any ours@<rev>); --log FILE (one
// JSON line per run, for your own statistics).
//
// Each mode is a Hono app on @hono/node-server in its own process (this file, run as
// `bench/middleware-ab.ts serve <mode>`), `GET /hello` answered by `c.text('hello')`, every request allowed:
//   none             no middleware
//   empty            an async middleware that only awaits next()
//   fixed-before     our five headers, fixed values, by c.header() before next()      (not a limiter)
//   fixed-after      the same five, set on c.res.headers after next()                 (not a limiter)
//   map-before       the least our contract can cost: a Map lookup by the socket address, a token taken
//                    from a plain counter, and the five headers formatted from it, by c.header() before
//                    next() (no refill, no policy object, no Decision)                 (not a limiter)
//   map-after        the same, the headers set on c.res.headers after next()           (not a limiter)
//   ours             src/http/middleware.ts as it stands (memory store, ipKey(), five headers)
//   ours-standard    the same with legacyHeaders: false: RateLimit and RateLimit-Policy only, the two
//                    headers hono-rate-limiter sends (draft-7)
//   ours@<rev>       src/http/middleware.ts and src/http/headers.ts as they were at git revision <rev> (`.`:
//                    as they are now), copied under node_modules/.cache and run over the working tree's
//                    limiter and stores, so only the HTTP layer differs; compare ours@<rev> with ours@.
//                    (both copies, loaded the same way) rather than with ours
//   ours-after       a copy of the middleware's allowed path (same policy lookup, ipKey(), take and src's
//                    header helpers), the headers set on c.res after next(), as src does
//   ours-before      the same copy, the headers set by c.header() before next(), then added after next()
//                    only if the response lacks them (a Response the handler made itself): the pair
//                    isolates where the headers are set
//   handler-plain    no middleware; the handler returns `new Response('hello', { headers })` with the five
//                    fixed headers in a plain object: @hono/node-server's cheapest path for a response with
//                    headers (no Headers object). Not reachable by a middleware through Hono's API.
//   nodeserver-plain the five fixed headers set after next() straight into @hono/node-server's private
//                    response cache as a plain object (found by its symbol's description), so no Headers
//                    object is made: what skipping undici's Headers would save. Relies on internals of
//                    @hono/node-server 2.x; a measurement, not something the middleware could ship.
//   hono-rate-limiter   as in bench/http-server.ts (memory store, draft-7: two headers)
//
// Every round runs every mode once, in an order rotated by one each round, so a burst of other work on
// this shared 2-core machine hits every mode alike. Per mode and run it records:
// - server CPU per request under rawLoad (bench/http-load.ts: 16 connections, a client that does not
//   parse responses), read from the server's own process.cpuUsage() over IPC: the primary figure;
// - requests/s under autocannon (50 connections, as bench/run.ts section 4), and the server's CPU per
//   request during that run.
// Ratios are per round, then the median (min-max) over rounds: for CPU, base's µs ÷ this mode's µs (a
// throughput ratio); for requests/s, this ÷ base. The medians of the first and second half of the rounds
// are printed too: when they disagree, run more rounds. Two copies of the same code make an A/A pair
// that shows how far noise alone moves a ratio (`ours@HEAD ours@HEAD~0`: 1.08 in 40 rounds on
// 2026-11-25, while other work kept this machine's load average between 2 and 6).
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Context, MiddlewareHandler } from 'hono';
import { autocannon, rawLoad, serverCpuUs } from './http-load.js';
import { spread } from './lib.js';

const self = fileURLToPath(import.meta.url);
const root = resolve(dirname(self), '..');

/** The HTTP layer's two files at `rev`, written under node_modules/.cache (outside git and tsc); returns the middleware's path. */
function middlewareAt(rev: string): string {
  const dir = join(root, 'node_modules/.cache/middleware-ab', rev === '.' ? 'working-tree' : rev.replace(/[^\w.-]/g, '_'));
  mkdirSync(dir, { recursive: true });
  const own = ['middleware', 'headers'];
  for (const name of own) {
    const text = rev === '.' ? readFileSync(join(root, `src/http/${name}.ts`), 'utf8') : execFileSync('git', ['show', `${rev}:src/http/${name}.ts`], { cwd: root, encoding: 'utf8' });
    // Every other relative import points at the working tree's module.
    const fixed = text.replace(/from '(\.{1,2}\/[^']+)'/g, (all, spec: string) => {
      if (own.some((o) => spec === `./${o}.js`)) return all;
      const target = relative(dir, join(root, 'src/http', spec));
      return `from '${target.startsWith('.') ? target : `./${target}`}'`;
    });
    writeFileSync(join(dir, `${name}.ts`), fixed);
  }
  return join(dir, 'middleware.ts');
}

if (process.argv[2] === 'serve') await serve(process.argv[3]!);
else await drive();

// The server -----------------------------------------------------------------------------------------

async function serve(mode: string): Promise<void> {
  const { Hono } = await import('hono');
  const { serve: listen } = await import('@hono/node-server');
  const { createLimiter, memoryStore } = await import('../src/index.js');
  const { rateLimit, ipKey } = await import('../src/hono.js');
  const { rateLimitHeaders, withHeaders } = await import('../src/http/headers.js');
  const { problemResponse } = await import('../src/http/problem.js');

  const FIXED: [string, string][] = [
    ['RateLimit-Policy', '"bench";q=1000000000;w=1000'],
    ['RateLimit', '"bench";r=999999999;t=1'],
    ['X-RateLimit-Limit', '1000000000'],
    ['X-RateLimit-Remaining', '999999999'],
    ['X-RateLimit-Reset', '1'],
  ];
  const peer = (c: Context) => (c.env as { incoming?: { socket?: { remoteAddress?: string } } }).incoming?.socket?.remoteAddress ?? 'unknown';
  const limiter = () => createLimiter({ store: memoryStore(), policies: { bench: { capacity: 1_000_000_000, refillPerSecond: 1_000_000 } } });

  /**
   * Our middleware's allowed path as src/http/middleware.ts runs it (policy lookup, key, take, headers),
   * with the headers placed `before` or `after` next(); the refusal branches are left out (never taken).
   */
  const variant = (placement: 'before' | 'after'): MiddlewareHandler => {
    const l = limiter();
    const key = ipKey();
    return async (c, next) => {
      const policy = l.policy('bench');
      if (!policy) return problemResponse('internal-error', 'no policy');
      const k = await key(c);
      if (k === undefined || k === '') return problemResponse('invalid-request', 'no key');
      const decision = await l.take('bench', k, { cost: 1, maxWaitMs: 0, waitUntil: undefined });
      const headers = rateLimitHeaders(policy, decision, true);
      if (!decision.allowed) return problemResponse('rate-limited', 'refused', {}, headers);
      if (placement === 'after') {
        await next();
        const res = withHeaders(c.res, headers);
        if (res !== c.res) c.res = res;
        return;
      }
      for (const name in headers) c.header(name, headers[name]);
      await next();
      const res = c.res;
      if (!res.headers.has('RateLimit-Policy')) {
        const copy = withHeaders(res, headers);
        if (copy !== res) c.res = copy;
      }
    };
  };
  /** The contract's floor: see the modes above. */
  const mapFloor = (placement: 'before' | 'after'): MiddlewareHandler => {
    const buckets = new Map<string, { tokens: number }>();
    return async (c, next) => {
      const ip = peer(c);
      let b = buckets.get(ip);
      if (!b) buckets.set(ip, (b = { tokens: 1_000_000_000 }));
      if (b.tokens < 1) return c.text('refused', 429);
      b.tokens--;
      const remaining = String(b.tokens);
      if (placement === 'before') {
        c.header('RateLimit-Policy', '"bench";q=1000000000;w=1000');
        c.header('RateLimit', `"bench";r=${remaining};t=1`);
        c.header('X-RateLimit-Limit', '1000000000');
        c.header('X-RateLimit-Remaining', remaining);
        c.header('X-RateLimit-Reset', '1');
        await next();
        return;
      }
      await next();
      const h = c.res.headers;
      h.set('RateLimit-Policy', '"bench";q=1000000000;w=1000');
      h.set('RateLimit', `"bench";r=${remaining};t=1`);
      h.set('X-RateLimit-Limit', '1000000000');
      h.set('X-RateLimit-Remaining', remaining);
      h.set('X-RateLimit-Reset', '1');
    };
  };

  const app = new Hono();
  switch (mode) {
    case 'none':
    case 'handler-plain':
      break;
    case 'empty':
      app.use('*', async (_c, next) => {
        await next();
      });
      break;
    case 'fixed-before':
      app.use('*', async (c, next) => {
        for (const [k, v] of FIXED) c.header(k, v);
        await next();
      });
      break;
    case 'fixed-after':
      app.use('*', async (c, next) => {
        await next();
        const h = c.res.headers;
        for (const [k, v] of FIXED) h.set(k, v);
      });
      break;
    case 'nodeserver-plain': {
      const plain = Object.fromEntries(FIXED);
      let cacheKey: symbol | undefined;
      app.use('*', async (c, next) => {
        await next();
        const res = c.res as Response & Record<symbol, [number, unknown, unknown] | undefined>;
        cacheKey ??= Object.getOwnPropertySymbols(res).find((sym) => sym.description === 'cache');
        const cache = cacheKey && res[cacheKey];
        if (cache && cache[2] === undefined && typeof cache[1] === 'string') cache[2] = { 'content-type': 'text/plain; charset=UTF-8', ...plain };
        else for (const [k, v] of FIXED) res.headers.set(k, v);
      });
      break;
    }
    case 'map-before':
    case 'map-after':
      app.use('*', mapFloor(mode === 'map-before' ? 'before' : 'after'));
      break;
    case 'ours':
    case 'ours-standard':
      app.use('*', rateLimit({ limiter: limiter(), policy: 'bench', key: ipKey(), legacyHeaders: mode === 'ours' }));
      break;
    case 'ours-before':
    case 'ours-after':
      app.use('*', variant(mode === 'ours-before' ? 'before' : 'after'));
      break;
    case 'hono-rate-limiter': {
      const { rateLimiter } = await import('hono-rate-limiter');
      app.use('*', rateLimiter({ windowMs: 60_000, limit: 1_000_000_000, standardHeaders: 'draft-7', keyGenerator: peer }));
      break;
    }
    default: {
      const at = /^ours@(.+)$/.exec(mode);
      if (!at) throw new Error(`unknown mode ${mode}`);
      const old = (await import(middlewareAt(at[1]!))) as typeof import('../src/http/middleware.js');
      app.use('*', old.rateLimit({ limiter: limiter(), policy: 'bench', key: ipKey() }));
    }
  }
  if (mode === 'handler-plain') {
    const init = { headers: { 'Content-Type': 'text/plain; charset=UTF-8', ...Object.fromEntries(FIXED) } };
    app.get('/hello', () => new Response('hello', init));
  } else app.get('/hello', (c) => c.text('hello'));
  listen({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => console.log(`listening ${info.port}`));
  process.on('message', (m) => {
    if (m === 'cpu') process.send!(process.cpuUsage());
  });
  // Exit cleanly on a signal, so that `node --cpu-prof` writes its profile.
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => process.exit(0));
}

// The driver -----------------------------------------------------------------------------------------

async function start(mode: string): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', self, 'serve', mode], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      const m = /listening (\d+)/.exec(String(d));
      if (m) resolve(Number(m[1]));
    });
    child.once('exit', (code) => reject(new Error(`server ${mode} exited ${code}`)));
  });
  return { child, port };
}

async function drive(): Promise<void> {
  const args = process.argv.slice(2);
  const opt = (name: string): string | undefined => {
    const i = args.indexOf(`--${name}`);
    return i === -1 ? undefined : args.splice(i, 2)[1];
  };
  const rounds = Number(opt('rounds') ?? 9);
  const requests = Number(opt('requests') ?? 30_000);
  const seconds = Number(opt('seconds') ?? 3);
  const logFile = opt('log');
  const modes = args;
  const bases = (opt('bases')?.split(',') ?? ['none', 'hono-rate-limiter', ...modes.filter((m) => m.startsWith('ours@'))]).filter((b) => modes.includes(b));
  if (modes.length === 0) throw new Error('usage: bench/middleware-ab.ts [--rounds N] [--requests N] [--seconds S] [--bases a,b] [--log FILE] <mode>...');

  const servers = new Map<string, { child: ChildProcess; port: number }>();
  for (const m of modes) servers.set(m, await start(m));
  // Per mode, one entry per round: server CPU µs per request under rawLoad; requests/s under autocannon
  // and the server's CPU µs per request during it.
  const figures = { cpu: 'server CPU µs/request, rawLoad', cannonRps: 'requests/s, autocannon', cannonCpu: 'server CPU µs/request, autocannon' } as const;
  type Figure = keyof typeof figures;
  const runs: Record<string, Record<Figure, number[]>> = Object.fromEntries(modes.map((m) => [m, { cpu: [], cannonRps: [], cannonCpu: [] }]));
  try {
    // Warm-up: one pass of each load on every server.
    for (const s of servers.values()) {
      if (requests > 0) await rawLoad(s.port, requests);
      if (seconds > 0) await autocannon(s.port, seconds);
    }
    for (let r = 0; r < rounds; r++) {
      const order = modes.map((_, i) => modes[(i + r) % modes.length]!);
      for (const m of order) {
        const s = servers.get(m)!;
        const run: Partial<Record<Figure, number>> = {};
        if (requests > 0) {
          const before = await serverCpuUs(s.child);
          await rawLoad(s.port, requests);
          run.cpu = ((await serverCpuUs(s.child)) - before) / requests;
        }
        if (seconds > 0) {
          const before = await serverCpuUs(s.child);
          const t = await autocannon(s.port, seconds);
          run.cannonRps = t.opsPerSec;
          run.cannonCpu = ((await serverCpuUs(s.child)) - before) / (t.opsPerSec * seconds);
        }
        for (const [f, v] of Object.entries(run)) runs[m]![f as Figure].push(v);
        if (logFile) appendFileSync(logFile, JSON.stringify({ round: r, mode: m, ...run }) + '\n');
      }
      process.stderr.write(`round ${r + 1}/${rounds}\n`);
    }
  } finally {
    for (const s of servers.values()) s.child.kill();
  }

  const fmt = (xs: number[], d: number) => {
    const s = spread(xs);
    return `${s.median.toFixed(d)} (${s.min.toFixed(d)}-${s.max.toFixed(d)})`;
  };
  const half = (xs: number[], second: boolean) => spread(second ? xs.slice(xs.length >> 1) : xs.slice(0, xs.length >> 1)).median.toFixed(2);
  console.log(`${rounds} interleaved rounds, each mode once per round${requests > 0 ? `: rawLoad ${requests} requests` : ''}${seconds > 0 ? `${requests > 0 ? ',' : ':'} autocannon ${seconds} s` : ''}`);
  console.log('Figures: median (min-max) over rounds. Ratios: per round, then median (min-max) [median of the first half / of the second half];');
  console.log('as throughput ratios: for CPU, base µs ÷ this µs; for requests/s, this ÷ base.');
  for (const f of Object.keys(figures) as Figure[]) {
    if (runs[modes[0]!]![f].length === 0) continue;
    console.log(`\n${figures[f]}`);
    console.log(`| mode | ${figures[f]} | ${bases.map((b) => `÷ ${b}`).join(' | ')} |`);
    console.log(`| --- | ---: | ${bases.map(() => '---:').join(' | ')} |`);
    for (const m of modes) {
      const xs = runs[m]![f];
      const cells = bases.map((b) => {
        if (b === m) return '—';
        const ratios = xs.map((x, i) => (f === 'cannonRps' ? x / runs[b]![f][i]! : runs[b]![f][i]! / x));
        return `${fmt(ratios, 2)} [${half(ratios, false)} / ${half(ratios, true)}]`;
      });
      console.log(`| ${m} | ${fmt(xs, f === 'cannonRps' ? 0 : 1)} | ${cells.join(' | ')} |`);
    }
  }
}
