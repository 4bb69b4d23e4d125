// Runs the Worker inside workerd the way users do: `npm run dev` (scripts/dev.mjs -> wrangler dev) on a
// free port, plus the `wrangler deploy --dry-run` bundle for size and content checks.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort } from '../../scripts/lib/redis-server.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const wranglerBin = join(root, 'node_modules/wrangler/bin/wrangler.js');

export interface WorkerBuild {
  dir: string;
  /** The bundle as deployed (minified per the config). */
  source: string;
  /** The modules in it, relative to the checkout (from its source map: names survive minifying). */
  modules: string[];
}

/** `wrangler deploy --dry-run --outdir <tmp>` with the given config file, and the source map. */
export async function buildWorker(config = 'wrangler.toml'): Promise<WorkerBuild> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-limiter-worker-'));
  await promisify(execFile)(process.execPath, [wranglerBin, 'deploy', '--dry-run', '--outdir', dir, '--config', config, '--upload-source-maps'], {
    cwd: root,
    env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CI: 'true' },
  });
  const map = JSON.parse(readFileSync(join(dir, 'worker.js.map'), 'utf8')) as { sources: string[] };
  const modules = map.sources.map((s) => relative(root, resolve(dir, s)).split('\\').join('/'));
  return { dir, source: readFileSync(join(dir, 'worker.js'), 'utf8'), modules };
}

export interface DevWorker {
  url: string;
  /** Everything the dev script printed so far. */
  output(): string;
  /** The curl line the dev script printed. */
  curlLine(): string;
  stop(): Promise<void>;
}

function withoutTokens(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const { PERMIT_TOKENS: _, ...rest } = env;
  return rest;
}

/** Starts `node scripts/dev.mjs` (what `npm run dev` runs) with extra Worker variables. */
export async function startDevWorker(vars: Record<string, string> = {}, extraArgs: string[] = []): Promise<DevWorker> {
  const port = await freePort();
  const args = [join(root, 'scripts/dev.mjs'), ...Object.entries(vars).flatMap(([k, v]) => ['--var', `${k}:${v}`]), ...extraArgs];
  const child: ChildProcess = spawn(process.execPath, args, {
    cwd: root,
    // Without PERMIT_TOKENS in vars, the dev script's own default tokens (and its curl line's).
    env: { ...withoutTokens(process.env), PORT: String(port), ...(vars.PERMIT_TOKENS === undefined ? {} : { PERMIT_TOKENS: vars.PERMIT_TOKENS }) },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const deadline = Date.now() + 60_000;
  while (!/curl -i .*\n/.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {}
      throw new Error(`npm run dev did not come up:\n${out.slice(-3000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url: `http://127.0.0.1:${port}`,
    output: () => out,
    curlLine: () => /^(curl -i .*)$/m.exec(out)![1]!,
    async stop() {
      try {
        process.kill(-child.pid!, 'SIGTERM');
      } catch {}
      const t = setTimeout(() => {
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {}
      }, 5000);
      await exited;
      clearTimeout(t);
    },
  };
}
