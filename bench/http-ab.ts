// An interleaved A/B of the HTTP benchmark's servers: `node --import tsx bench/http-ab.ts <seconds> <mode>...`
// with modes of bench/http-server.ts (none, ours, ours-draft-headers, hono-rate-limiter). Each round
// runs autocannon (50 connections) against every server in turn, after one warm-up pass; ratios are
// per round, against the first mode and against hono-rate-limiter when it is among them. ROUNDS sets
// the number of rounds (default 5).
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { spread } from './lib.js';

const run = promisify(execFile);
const sec = Number(process.argv[2] ?? 3);
const modes = process.argv.slice(3);
if (modes.length === 0) throw new Error('usage: bench/http-ab.ts <seconds> <mode>...');

async function start(mode: string): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/http-server.ts', mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      const m = /listening (\d+)/.exec(String(d));
      if (m) resolve(Number(m[1]));
    });
    child.once('exit', (code) => reject(new Error(`http server ${mode} exited ${code}`)));
  });
  return { child, port };
}

async function cannon(port: number): Promise<number> {
  const { stdout } = await run(process.execPath, ['node_modules/autocannon/autocannon.js', '-c', '50', '-d', String(sec), '-j', `http://127.0.0.1:${port}/hello`], { maxBuffer: 1 << 24 });
  const r = JSON.parse(stdout) as { requests: { total: number }; non2xx: number; errors: number };
  if (r.non2xx || r.errors) throw new Error(`autocannon saw ${r.non2xx} non-2xx and ${r.errors} errors`);
  return r.requests.total / sec;
}

const servers = new Map<string, { child: ChildProcess; port: number }>();
for (const m of modes) servers.set(m, await start(m));
for (const s of servers.values()) await cannon(s.port);
const perSec: Record<string, number[]> = {};
for (let r = 0; r < Number(process.env.ROUNDS ?? 5); r++) for (const [m, s] of servers) (perSec[m] ??= []).push(await cannon(s.port));
const ratio = (m: string, base: string) => spread(perSec[m]!.map((x, i) => x / perSec[base]![i]!)).median.toFixed(2);
for (const m of modes) {
  const vsHrl = perSec['hono-rate-limiter'] ? `, ÷ hono-rate-limiter ${ratio(m, 'hono-rate-limiter')}` : '';
  console.log(`${m}: ${spread(perSec[m]!).median.toFixed(0)} requests/s, ÷ ${modes[0]} ${ratio(m, modes[0]!)}${vsHrl}`);
}
for (const s of servers.values()) s.child.kill();
