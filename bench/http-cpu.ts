// The HTTP server's own CPU per request, by mode: `node --import tsx bench/http-cpu.ts [requests] [mode...]`
// (modes of bench/http-server.ts; default: all of them).
// Each server runs in its own process; this process drives it with rawLoad (16 keep-alive connections,
// a client that does not parse responses) and reads the server's CPU time over IPC before and after.
// Rounds are interleaved across modes, after one warm-up pass; ROUNDS sets how many (default 5).
// Unlike requests/s under autocannon (RESULTS.md), this does not depend on the load generator's cost of
// parsing each response, which grows with its headers and shares this machine's two cores.
import type { ChildProcess } from 'node:child_process';
import { rawLoad, serverCpuUs, startHttpServer } from './http-load.js';
import { spread } from './lib.js';

const requests = Number(process.argv[2] ?? 40_000);
const modes =
  process.argv.length > 3
    ? process.argv.slice(3)
    : ['none', 'empty-middleware', 'draft-headers-only', 'headers-only', 'ours-draft-headers', 'ours', 'hono-rate-limiter'];
const rounds = Number(process.env.ROUNDS ?? 5);

async function cpuPerRequest(server: { child: ChildProcess; port: number }): Promise<number> {
  const before = await serverCpuUs(server.child);
  await rawLoad(server.port, requests);
  return ((await serverCpuUs(server.child)) - before) / requests;
}

const servers = new Map<string, { child: ChildProcess; port: number }>();
for (const m of modes) servers.set(m, await startHttpServer(m));
try {
  for (const s of servers.values()) await rawLoad(s.port, requests); // warm-up
  const us: Record<string, number[]> = {};
  for (let r = 0; r < rounds; r++) for (const [m, s] of servers) (us[m] ??= []).push(await cpuPerRequest(s));
  const base = modes[0]!;
  console.log(`server CPU per request, µs: median (min-max) of ${rounds} interleaved rounds of ${requests} requests`);
  for (const m of modes) {
    const s = spread(us[m]!);
    // ÷ base as a throughput ratio: base's CPU per request over this mode's, per round.
    const ratio = spread(us[m]!.map((x, i) => us[base]![i]! / x)).median;
    console.log(`${m}: ${s.median.toFixed(1)} (${s.min.toFixed(1)}-${s.max.toFixed(1)}), ${base}'s CPU ÷ this ${ratio.toFixed(2)}`);
  }
} finally {
  for (const s of servers.values()) s.child.kill();
}
