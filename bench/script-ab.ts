// Our Redis scripts now against those of another commit, in Redis time per decision:
// `node --import tsx bench/script-ab.ts <redis port> <git revision> [--aa]`.
// The single-key script runs by redis-benchmark (concurrency 16 and 1); the batch script is sent by
// hand over one ioredis connection (batches of 64, 16 and 4 distinct keys, 4 calls in flight). Both
// versions alternate within each round (9 rounds), and the ratio is taken per round: this VM's speed
// drifts by tens of percent between minutes.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { GCRA_BATCH_SCRIPT, GCRA_SCRIPT } from '../src/stores/redis-script.js';
import { scriptStats } from '../test/support/redis-stats.js';
import { spread } from './lib.js';

const port = Number(process.argv[2] ?? 6379);
const rev = process.argv[3];
if (!rev) throw new Error('usage: bench/script-ab.ts <redis port> <git revision> [--aa]');
// --aa: both sides run the revision's scripts (an A/A), to read the noise the same rounds show.
const aa = process.argv.includes('--aa');
const rounds = 9;
const io = new Redis(port);

/**
 * The scripts at `rev`: its src/ extracted to a temporary directory and src/stores/redis-script.ts
 * imported from there, so that scripts built from parts (the straight-line takes since gcra v10, the
 * constants they interpolate) come out as that revision built them.
 */
async function scriptsAt(): Promise<{ GCRA_SCRIPT: string; GCRA_BATCH_SCRIPT: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-limiter-script-ab-'));
  execFileSync('tar', ['-x', '-C', dir], { input: execFileSync('git', ['archive', rev!, 'src'], { maxBuffer: 1 << 28 }) });
  try {
    return (await import(pathToFileURL(join(dir, 'src/stores/redis-script.ts')).href)) as { GCRA_SCRIPT: string; GCRA_BATCH_SCRIPT: string };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const then = await scriptsAt();

const range = (xs: number[]) => ((s) => `${s.median.toFixed(2)} (${s.min.toFixed(2)}–${s.max.toFixed(2)})`)(spread(xs));

// Redis's main thread CPU time in µs, from its /proc schedstat (time on a CPU), when the server runs on
// this machine: unlike commandstats' usec, which is wall-clock time, it does not grow when other
// processes preempt Redis, so it is the steadier figure on a busy VM. It also counts what is not the
// script (reading commands, writing replies), the same for both versions, so its ratio is diluted.
const pid = /process_id:(\d+)/.exec(await io.info('server'))?.[1];
function redisCpuUs(): number | undefined {
  try {
    return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1000;
  } catch {
    return undefined;
  }
}

// One take of 1 unit of a 1e9-unit limit refilling 1 unit per µs, in the ARGV layout of the script's
// version: gcra v6-v7 and batch v4 take the clock first and each limit as a triple (a batch key's count
// before it); earlier versions took costUnits, limitUnits, refillUnitsPerUs and the clock last.
// gcra v12 and batch v9 add the base and the policy-wide change (issue 31): after the kind's extra; in a
// batch, once after the last key, each key's count naming it (1 limit, entry 1: 17).
const LIMIT = ['1', '1000000000', '1'];
const BASE = '0,1,1000000000';
const multi = (script: string) => /-- edge-limiter gcra (v([6-9]|\d\d)|batch v([4-9]|\d\d))\b/.test(script);
const records = (script: string) => /-- edge-limiter gcra (v(1[2-9]|[2-9]\d)|batch v(9|\d\d))\b/.test(script);
const singleArgs = (script: string) => (records(script) ? ['', 't', '', BASE, '', ...LIMIT] : multi(script) ? ['', 't', '', ...LIMIT] : [...LIMIT, '']);

/**
 * Runs `once(version)` (its script time in µs and the decisions made) for both versions in every round;
 * prints medians and the per-round ratio, of the script time and of Redis's CPU time per decision.
 */
async function ab(label: string, versions: Record<'now' | 'then', string>, once: (sha: string, tag: string) => Promise<{ usec: number; decisions: number }>): Promise<void> {
  const shas = { now: (await io.script('LOAD', versions.now)) as string, then: (await io.script('LOAD', versions.then)) as string };
  const us: Record<'now' | 'then', number[]> = { now: [], then: [] };
  const cpu: Record<'now' | 'then', number[]> = { now: [], then: [] };
  for (let r = 0; r < rounds; r++) {
    for (const v of ['then', 'now'] as const) {
      const before = redisCpuUs();
      const { usec, decisions } = await once(shas[v], `ab${v}`);
      const after = redisCpuUs();
      us[v].push(usec / decisions);
      if (before !== undefined && after !== undefined) cpu[v].push((after - before) / decisions);
    }
  }
  const ratio = (xs: Record<'now' | 'then', number[]>) => range(xs.now.map((x, i) => x / xs.then[i]!));
  console.log(
    `${label}, median (min–max) of ${rounds} rounds: script time ${rev} ${range(us.then)}, now ${range(us.now)} µs per decision, ` +
      `now ÷ ${rev} ${ratio(us)}` +
      (cpu.now.length === rounds ? `; Redis CPU ${rev} ${range(cpu.then)}, now ${range(cpu.now)} µs per decision, now ÷ ${rev} ${ratio(cpu)}` : ''),
  );
}

for (const c of [16, 1]) {
  const versions = { now: aa ? then.GCRA_SCRIPT : GCRA_SCRIPT, then: then.GCRA_SCRIPT };
  await ab(`single-key script, redis-benchmark at concurrency ${c}`, versions, async (sha, tag) => {
    const args = singleArgs(tag === 'abnow' ? versions.now : versions.then);
    await io.config('RESETSTAT');
    execFileSync('redis-benchmark', ['-p', String(port), '-c', String(c), '-n', '30000', '-r', '1000', '-q', 'EVALSHA', sha, '1', `${tag}:__rand_int__`, ...args]);
    const s = await scriptStats(io);
    return { usec: s.usec, decisions: s.calls };
  });
}
for (const size of [64, 16, 4]) {
  const versions = { now: aa ? then.GCRA_BATCH_SCRIPT : GCRA_BATCH_SCRIPT, then: then.GCRA_BATCH_SCRIPT };
  await ab(`batch script, ${size} keys per call`, versions, async (sha, tag) => {
    const script = tag === 'abnow' ? versions.now : versions.then;
    const v4 = multi(script);
    const v9 = records(script);
    await io.config('RESETSTAT');
    const calls = 2000;
    let inFlight: Promise<unknown>[] = [];
    for (let c = 0; c < calls; c++) {
      const keys: string[] = [];
      const args: string[] = v4 ? [''] : [];
      for (let j = 0; j < size; j++) {
        keys.push(`${tag}:k${(c * size + j) % 1000}`);
        if (v4) args.push(v9 ? '17' : '1');
        args.push(...LIMIT);
      }
      if (!v4) args.push('');
      if (v9) args.push(BASE, '');
      inFlight.push(io.evalsha(sha, size, ...keys, ...args));
      if (inFlight.length >= 4) {
        await Promise.all(inFlight);
        inFlight = [];
      }
    }
    await Promise.all(inFlight);
    return { usec: (await scriptStats(io)).usec, decisions: calls * size };
  });
}
io.disconnect();
