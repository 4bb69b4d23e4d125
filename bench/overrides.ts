// Section 13 of `npm run bench`: what runtime limits (issue 31) cost at Redis, in Redis time per decision.
// - a decision on a key with no record, against the scripts of c2ca911 (the revision before runtime
//   limits): the single-key script and the batch script (64 keys per call), with the ARGV each sends;
// - a decision on a key with an override record (numbers of its own), against a plain one;
// - a decision under a policy-wide change (StepArgs.policy: each key's step installs the change's
//   record, then steps under it), against a plain one.
// Every variant runs once per round, interleaved; ratios are taken per round, shown as median (min–max).
// "Script time" is INFO commandstats usec of the script calls (wall time inside Redis); "Redis CPU" is
// the server thread's CPU time from /proc (steadier on a busy machine; it also counts reading commands
// and writing replies, the same for every variant, so its ratios are diluted).
// Run on its own (`npm run bench:overrides [-- --quick]`) it starts a redis-server and writes
// bench/RESULTS.overrides.md; `npm run bench` runs it as section 13 of bench/RESULTS.md.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { runAlone, type SectionOptions } from './alone.js';
import { GCRA_BATCH_SCRIPT, GCRA_SCRIPT } from '../src/stores/redis-script.js';
import { OVERRIDE_SCRIPT } from '../src/stores/redis-override.js';
import { POLICY_HOLD_MS } from '../src/limiter/policy-wide.js';
import { scriptStats } from '../test/support/redis-stats.js';
import { fmt, fmtSpread, spread } from './lib.js';

/** The revision before runtime limits: its scripts are the "today" of the no-record A/B. */
const BEFORE = 'c2ca911';

/** A take of 1 unit of a 1e9-unit limit refilling 1 per µs (capacity 1e9 at 1e6/s), as the limiter sends it. */
const LIMIT = ['1', '1000000000', '1'];
const BASE = '0,1,1000000000';
/** Numbers of a record or a change: twice the capacity, so no take is refused in any round. */
const NUMBERS = '1,2000000000,1';
/** A policy-wide change as the limiter sends it: its numbers, no end, the hold (POLICY_HOLD_MS, the same on every node) and its id. */
const CHANGE = `${NUMBERS}||${POLICY_HOLD_MS}|incident`;
/** No policy-wide change, as the limiter sends it once it has read the policy's record: the version read (none: 0) and the hold. */
const NONE = `!0|${POLICY_HOLD_MS}`;
/** No change, as a limiter sends it after a revert: the revert's version (here 1, before every key's last write, so each keeps its straight-line take, which now reads it). */
const NONE_SEEN = `!1|${POLICY_HOLD_MS}`;

async function scriptsBefore(): Promise<{ GCRA_SCRIPT: string; GCRA_BATCH_SCRIPT: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-limiter-overrides-'));
  execFileSync('tar', ['-x', '-C', dir], { input: execFileSync('git', ['archive', BEFORE, 'src'], { maxBuffer: 1 << 28 }) });
  try {
    return (await import(pathToFileURL(join(dir, 'src/stores/redis-script.ts')).href)) as { GCRA_SCRIPT: string; GCRA_BATCH_SCRIPT: string };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Variant {
  label: string;
  script: string;
  /** KEYS and ARGV of call c. */
  call: (c: number) => [string[], string[]];
  perCall: number;
}

export async function overridesSection(options: SectionOptions): Promise<string[]> {
  const { io, quick, runs, log } = options;
  const decisions = quick ? 1536 : 8192;
  const then = await scriptsBefore();
  const single = (prefix: string, argv: string[]) => (c: number): [string[], string[]] => [[`${prefix}:k${c % 1000}`], argv];
  const batch = (prefix: string, argv: (keys: number) => string[]) => (c: number): [string[], string[]] => [Array.from({ length: 64 }, (_, j) => `${prefix}:k${(c * 64 + j) % 1000}`), argv(64)];
  const batchNow = (entry: [string, string]) => (keys: number) => ['', ...Array.from({ length: keys }, () => ['17', ...LIMIT]).flat(), ...entry];
  const variants: Variant[] = [
    { label: 'single, no record, before', script: then.GCRA_SCRIPT, call: single('b13a', ['', 't', '', ...LIMIT]), perCall: 1 },
    { label: 'single, no record, now', script: GCRA_SCRIPT, call: single('b13b', ['', 't', '', BASE, NONE, ...LIMIT]), perCall: 1 },
    { label: 'single, a record, now', script: GCRA_SCRIPT, call: single('b13c', ['', 't', '', BASE, NONE, ...LIMIT]), perCall: 1 },
    { label: 'single, a policy-wide change, now', script: GCRA_SCRIPT, call: single('b13d', ['', 't', '', BASE, CHANGE, ...LIMIT]), perCall: 1 },
    { label: 'batch, no record, before', script: then.GCRA_BATCH_SCRIPT, call: batch('b13e', (k) => ['', ...Array.from({ length: k }, () => ['1', ...LIMIT]).flat()]), perCall: 64 },
    { label: 'batch, no record, now', script: GCRA_BATCH_SCRIPT, call: batch('b13f', batchNow([BASE, NONE])), perCall: 64 },
    { label: 'batch, a record, now', script: GCRA_BATCH_SCRIPT, call: batch('b13g', batchNow([BASE, NONE])), perCall: 64 },
    { label: 'batch, a policy-wide change, now', script: GCRA_BATCH_SCRIPT, call: batch('b13h', batchNow([BASE, CHANGE])), perCall: 64 },
    { label: 'single, no record, after a revert, now', script: GCRA_SCRIPT, call: single('b13i', ['', 't', '', BASE, NONE_SEEN, ...LIMIT]), perCall: 1 },
    { label: 'batch, no record, after a revert, now', script: GCRA_BATCH_SCRIPT, call: batch('b13j', batchNow([BASE, NONE_SEEN])), perCall: 64 },
  ];
  const shas = await Promise.all(variants.map((v) => io.script('LOAD', v.script) as Promise<string>));
  // Every key of the record variants gets its own numbers (no end), through the override script.
  const overrideSha = (await io.script('LOAD', OVERRIDE_SCRIPT)) as string;
  for (const prefix of ['b13c', 'b13g']) {
    for (let k = 0; k < 1000; k++) await io.evalsha(overrideSha, 1, `${prefix}:k${k}`, '', 'o', LIMIT.join(','), NUMBERS, '', '', '', '');
  }
  const pid = /process_id:(\d+)/.exec(await io.info('server'))?.[1];
  const cpuUs = (): number | undefined => {
    try {
      return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1000;
    } catch {
      return undefined;
    }
  };
  async function once(v: Variant, sha: string): Promise<{ us: number; cpu: number | undefined }> {
    const calls = decisions / v.perCall;
    const inFlightMax = v.perCall === 1 ? 16 : 4;
    await io.config('RESETSTAT');
    const before = cpuUs();
    let inFlight: Promise<unknown>[] = [];
    for (let c = 0; c < calls; c++) {
      const [keys, argv] = v.call(c);
      inFlight.push(io.evalsha(sha, keys.length, ...keys, ...argv));
      if (inFlight.length >= inFlightMax) {
        await Promise.all(inFlight);
        inFlight = [];
      }
    }
    await Promise.all(inFlight);
    const after = cpuUs();
    const s = await scriptStats(io);
    return { us: s.usec / decisions, cpu: before === undefined || after === undefined ? undefined : (after - before) / decisions };
  }
  log('overrides: warm-up');
  for (let i = 0; i < variants.length; i++) await once(variants[i]!, shas[i]!);
  const us = variants.map(() => [] as number[]);
  const cpu = variants.map(() => [] as number[]);
  for (let r = 0; r < runs; r++) {
    log(`overrides: round ${r + 1} of ${runs}`);
    for (let i = 0; i < variants.length; i++) {
      const got = await once(variants[i]!, shas[i]!);
      us[i]!.push(got.us);
      if (got.cpu !== undefined) cpu[i]!.push(got.cpu);
    }
  }
  const withCpu = cpu.every((x) => x.length === runs);
  const ratio = (xs: number[][], a: number, b: number) => fmtSpread(spread(xs[a]!.map((x, i) => x / xs[b]![i]!)), 2);
  const md: string[] = ['## 13. Runtime limits (override records) at Redis', ''];
  md.push(
    `One ioredis connection to this run's redis-server; ${fmt(decisions)} takes per variant per round over 1,000 keys, all allowed (huge limits); the single-key script 16 calls in flight, the batch script 64 keys per call and 4 calls in flight; ${runs} interleaved rounds after a warm-up, median (min–max). "Script time" is INFO commandstats usec of the script calls per decision; "Redis CPU" is the server thread's CPU time per decision${withCpu ? '' : ' (not available on this machine)'}. "Before" is the scripts of ${BEFORE}, the revision before runtime limits, sent the ARGV they take; "now" sends what the limiter sends (the base, and the policy-wide change where there is one, else "no change, version 0" and the hold).`,
    '',
    `| decision | script | script time µs | ÷ | Redis CPU µs | ÷ |`,
    '| --- | --- | ---: | ---: | ---: | ---: |',
  );
  const row = (label: string, script: string, i: number, base: number | undefined) =>
    md.push(
      `| ${label} | ${script} | ${fmtSpread(spread(us[i]!), 2)} | ${base === undefined ? '—' : ratio(us, i, base)} | ${withCpu ? fmtSpread(spread(cpu[i]!), 2) : '—'} | ${withCpu && base !== undefined ? ratio(cpu, i, base) : '—'} |`,
    );
  row(`a key with no record, ${BEFORE}`, 'single-key', 0, undefined);
  row('a key with no record, now (÷ before)', 'single-key', 1, 0);
  row('a key with a record of its own (÷ no record, now)', 'single-key', 2, 1);
  row('under a policy-wide change (÷ no record, now)', 'single-key', 3, 1);
  row(`a key with no record, ${BEFORE}`, 'batch, 64 keys', 4, undefined);
  row('a key with no record, now (÷ before)', 'batch, 64 keys', 5, 4);
  row('a key with a record of its own (÷ no record, now)', 'batch, 64 keys', 6, 5);
  row('under a policy-wide change (÷ no record, now)', 'batch, 64 keys', 7, 5);
  row('a key with no record after a revert (÷ no record, now)', 'single-key', 8, 1);
  row('a key with no record after a revert (÷ no record, now)', 'batch, 64 keys', 9, 5);
  md.push(
    '',
    `Targets: a decision on a key with no record at most 1.05× ${BEFORE}'s in Redis time; on a key with a record, at most 1.15× a plain one. A policy-wide change costs each key one write of its record the first time it is stepped under the change; after that a decision under it costs what a key with a record costs (the rows above measure both, the first write amortized over the rounds). After a revert a limiter sends the revert's version, which the straight-line take of a key with no record reads, to step a key written before it by the general step (it refills nothing up to it); the last rows are such keys, all written after it.`,
    '',
  );
  return md;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await runAlone({ title: '# Runtime limits at Redis: benchmark', script: 'bench:overrides', section: 13, results: 'RESULTS.overrides.md', run: overridesSection });
}
