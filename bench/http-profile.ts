// Where an HTTP server mode's CPU goes, against another: `node --import tsx bench/http-profile.ts <base> <mode> [requests]`
// (modes of bench/http-server.ts). Runs each server under `node --cpu-prof`, drives it with rawLoad
// (a warm-up of a fifth of the requests, then the requests), and prints the busy (non-idle) µs per
// request of each, then the functions whose self time per request differs most. One run of each, so
// repeat it before trusting a difference of a microsecond or two on a noisy machine.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rawLoad, startHttpServer } from './http-load.js';

const [base, mode] = process.argv.slice(2, 4);
if (!base || !mode) throw new Error('usage: bench/http-profile.ts <base mode> <mode> [requests]');
const requests = Number(process.argv[4] ?? 150_000);

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

/** Self time in µs by function ("name file:line"), over the whole run of one server. */
async function selfTimes(m: string): Promise<Map<string, number>> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-limiter-prof-'));
  try {
    const { child, port } = await startHttpServer(m, ['--cpu-prof', `--cpu-prof-dir=${dir}`]);
    await rawLoad(port, Math.ceil(requests / 5));
    await rawLoad(port, requests);
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGINT');
    await exited;
    const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
    if (!file) throw new Error(`no profile written for ${m}`);
    const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
    const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
    const out = new Map<string, number>();
    profile.samples.forEach((id, i) => {
      const f = frames.get(id)!;
      const name = `${f.functionName || '(anonymous)'} ${f.url.split('/').at(-1)}:${f.lineNumber}`;
      out.set(name, (out.get(name) ?? 0) + profile.timeDeltas[i]!);
    });
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const total = requests + Math.ceil(requests / 5);
const a = await selfTimes(base);
const b = await selfTimes(mode);
const busy = (t: Map<string, number>) => [...t].filter(([k]) => !k.startsWith('(idle)')).reduce((s, [, v]) => s + v, 0) / total;
console.log(`busy CPU per request (the whole run, start-up included): ${base} ${busy(a).toFixed(1)} µs, ${mode} ${busy(b).toFixed(1)} µs`);
console.log(`largest differences in self time per request (${mode} - ${base}), µs:`);
const names = [...new Set([...a.keys(), ...b.keys()])].filter((k) => !k.startsWith('(idle)'));
names.sort((x, y) => Math.abs((b.get(y) ?? 0) - (a.get(y) ?? 0)) - Math.abs((b.get(x) ?? 0) - (a.get(x) ?? 0)));
for (const k of names.slice(0, 25)) {
  const da = (a.get(k) ?? 0) / total;
  const db = (b.get(k) ?? 0) / total;
  console.log(`${(db - da).toFixed(2).padStart(7)}  (${da.toFixed(2)} -> ${db.toFixed(2)})  ${k}`);
}
