// Reading V8 CPU profiles (`node --cpu-prof`) for the breakdown scripts: self time by function, and the
// functions where two runs differ most, per unit of work (a request, a decision).
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

/** Self time in µs by function ("name file:line") of the one profile `node --cpu-prof-dir=dir` wrote. */
export function selfTimes(dir: string): Map<string, number> {
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
  if (!file) throw new Error(`no CPU profile in ${dir}`);
  const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const out = new Map<string, number>();
  profile.samples.forEach((id, i) => {
    const f = frames.get(id)!;
    const name = `${f.functionName || '(anonymous)'} ${f.url.split('/').at(-1)}:${f.lineNumber}`;
    out.set(name, (out.get(name) ?? 0) + profile.timeDeltas[i]!);
  });
  return out;
}

/**
 * Runs `run` with the node flags that make a process write its CPU profile into a fresh directory, then
 * returns that profile's self times (see selfTimes) and removes the directory. `run` must end the process.
 */
export async function profiled(run: (nodeArgs: string[]) => Promise<void>): Promise<Map<string, number>> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-limiter-prof-'));
  try {
    await run(['--cpu-prof', `--cpu-prof-dir=${dir}`]);
    return selfTimes(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Prints each run's busy (non-idle) time per unit, then the `top` functions whose self time per unit differs most. */
export function printDiff(base: { label: string; times: Map<string, number> }, other: { label: string; times: Map<string, number> }, units: number, unit: string, top = 25): void {
  const busy = (t: Map<string, number>) => [...t].filter(([k]) => !k.startsWith('(idle)')).reduce((s, [, v]) => s + v, 0) / units;
  console.log(`busy CPU per ${unit} (the whole run, start-up included): ${base.label} ${busy(base.times).toFixed(1)} µs, ${other.label} ${busy(other.times).toFixed(1)} µs`);
  console.log(`largest differences in self time per ${unit} (${other.label} - ${base.label}), µs:`);
  const a = base.times;
  const b = other.times;
  const names = [...new Set([...a.keys(), ...b.keys()])].filter((k) => !k.startsWith('(idle)'));
  const diff = (k: string) => ((b.get(k) ?? 0) - (a.get(k) ?? 0)) / units;
  names.sort((x, y) => Math.abs(diff(y)) - Math.abs(diff(x)));
  for (const k of names.slice(0, top)) {
    console.log(`${diff(k).toFixed(2).padStart(7)}  (${((a.get(k) ?? 0) / units).toFixed(2)} -> ${((b.get(k) ?? 0) / units).toFixed(2)})  ${k}`);
  }
}
