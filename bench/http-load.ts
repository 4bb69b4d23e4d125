// The HTTP benchmark's two processes, shared by bench/run.ts and bench/http-ab.ts: a server of
// bench/http-server.ts in one of its modes, and autocannon in its own process (the server under test
// must not share its CPU time slice with the load generator).
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Throughput } from './lib.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const run = promisify(execFile);

/** Starts bench/http-server.ts in `mode` (none, ours, ours-draft-headers, hono-rate-limiter). */
export async function startHttpServer(mode: string): Promise<{ port: number; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'bench/http-server.ts'), mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      const m = /listening (\d+)/.exec(String(d));
      if (m) resolve(Number(m[1]));
    });
    child.once('exit', (code) => reject(new Error(`http server ${mode} exited ${code}`)));
  });
  return { port, child };
}

/** `GET /hello` with 50 connections for `seconds`; throws if any response was not 2xx. */
export async function autocannon(port: number, seconds: number): Promise<Throughput> {
  const { stdout } = await run(process.execPath, [join(root, 'node_modules/autocannon/autocannon.js'), '-c', '50', '-d', String(seconds), '-j', `http://127.0.0.1:${port}/hello`], { maxBuffer: 1 << 24 });
  const r = JSON.parse(stdout) as { requests: { total: number }; latency: { p50: number; p99: number }; non2xx: number; errors: number };
  if (r.non2xx || r.errors) throw new Error(`autocannon saw ${r.non2xx} non-2xx and ${r.errors} errors`);
  return { opsPerSec: r.requests.total / seconds, p50Ms: r.latency.p50, p99Ms: r.latency.p99 };
}
