// An interleaved A/B of the HTTP benchmark's servers: `node --import tsx bench/http-ab.ts <seconds> <mode>...`
// with modes of bench/http-server.ts (none, ours, ours-draft-headers, hono-rate-limiter). Each round
// runs autocannon (50 connections) against every server in turn, after one warm-up pass; ratios are
// per round, against the first mode and against hono-rate-limiter when it is among them. ROUNDS sets
// the number of rounds (default 5).
import type { ChildProcess } from 'node:child_process';
import { autocannon, startHttpServer } from './http-load.js';
import { spread } from './lib.js';

const sec = Number(process.argv[2] ?? 3);
const modes = process.argv.slice(3);
if (modes.length === 0) throw new Error('usage: bench/http-ab.ts <seconds> <mode>...');

const servers = new Map<string, { child: ChildProcess; port: number }>();
for (const m of modes) servers.set(m, await startHttpServer(m));
for (const s of servers.values()) await autocannon(s.port, sec);
const perSec: Record<string, number[]> = {};
for (let r = 0; r < Number(process.env.ROUNDS ?? 5); r++) for (const [m, s] of servers) (perSec[m] ??= []).push((await autocannon(s.port, sec)).opsPerSec);
const ratio = (m: string, base: string) => spread(perSec[m]!.map((x, i) => x / perSec[base]![i]!)).median.toFixed(2);
for (const m of modes) {
  const vsHrl = perSec['hono-rate-limiter'] ? `, ÷ hono-rate-limiter ${ratio(m, 'hono-rate-limiter')}` : '';
  console.log(`${m}: ${spread(perSec[m]!).median.toFixed(0)} requests/s, ÷ ${modes[0]} ${ratio(m, modes[0]!)}${vsHrl}`);
}
for (const s of servers.values()) s.child.kill();
