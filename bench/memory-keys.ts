// What the memory store's key bound costs, and an A/B of the memory store against another revision:
// `node --import tsx bench/memory-keys.ts [--keys 1,100000] [--rounds 15] [--n 300000] [--against HEAD] [--cpu]`.
// Interleaved in every round (in a rotated order, so that no row always runs after the same one), through
// the same `measure()` loop as RESULTS.md section 3 (concurrency 1, every decision allowed, key k{i % keys}):
// - ours: `createLimiter` on `memoryStore()` (maxKeys 100,000, as in `npm run bench`);
// - rate-limiter-flexible's `RateLimiterMemory`, which keeps no bound on keys;
// - ours on an unbounded store: `memoryStore`'s slot layout and the same core step, without the bound
//   (no refill rate kept for eviction, no used bit, no maxKeys check): ours minus it is what the bound costs;
// - with --against REV: ours as of that git revision (its whole src/, limiter and store), the before/after
//   of a change;
// - the loop alone (an already-resolved promise).
// Prints, per key count and row, the median over rounds of ours ÷ RateLimiterMemory as run.ts computes
// it (this row's rate ÷ the peer's, per round) with its min–max, and ns per iteration beyond the loop;
// with --against, also the time per decision now ÷ at REV, paired within each round.
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { createLimiter, memoryStore, type Store } from '../src/index.js';
import { decayed, step, takeUnits, type BucketState, type LimitStep, type StepArgs, type StepResult } from '../src/core/gcra.js';
import { flattened, ownCopy, ROPE_MIN_LENGTH } from '../src/core/key.js';
import { measure, spread } from './lib.js';

const { values: opt } = parseArgs({
  options: { keys: { type: 'string', default: '1,100000' }, rounds: { type: 'string', default: '15' }, n: { type: 'string', default: '300000' }, against: { type: 'string' }, cpu: { type: 'boolean', default: false } },
});
const keyCounts = opt.keys.split(',').map(Number);
const rounds = Number(opt.rounds);
const n = Number(opt.n);
const HUGE = { capacity: 1_000_000_000, refillPerSecond: 1_000_000 };

/** memoryStore without its bound: the same slots and step, nothing kept or checked for eviction. */
function unboundedStore(): Store {
  const perf = performance;
  const originUs = Math.round(perf.timeOrigin * 1000);
  const slots = new Map<string, number>();
  let nums = new Float64Array(2 * 64);
  let next = 0;
  const several = new Map<number, readonly number[]>();
  const oneDebt = [0];
  const view: BucketState = { debtUnits: oneDebt, atUs: 0 };
  /** The bucket's slot, or a new one at the end (the array doubling as it fills). */
  function slotFor(key: string, at: number | undefined): number {
    if (at !== undefined) return at;
    const to = next;
    next += 2;
    unindex.push(undefined);
    if (next > nums.length) {
      const grown = new Float64Array(nums.length * 2);
      grown.set(nums);
      nums = grown;
    }
    slots.set(key, to);
    return to;
  }
  function stepSync(key: string, args: StepArgs): StepResult {
    const now = originUs + Math.floor(perf.now() * 1000);
    key = flattened(key);
    const at = slots.get(key);
    let state: BucketState | undefined;
    if (at !== undefined) {
      const more = several.size === 0 ? undefined : several.get(at);
      if (more === undefined) {
        oneDebt[0] = nums[at + 1]!;
        view.debtUnits = oneDebt;
      } else view.debtUnits = more;
      view.atUs = nums[at]!;
      state = view;
    }
    const r = step(state, now, args);
    const { write } = r;
    if (write) {
      const to = slotFor(key, at);
      nums[to] = now;
      if (write.debtUnits.length > 1) several.set(to, write.debtUnits);
      else {
        nums[to + 1] = write.debtUnits[0]!;
        if (several.size !== 0) several.delete(to);
      }
    } else if (write === null) forget(key);
    return r;
  }
  // takeOneSync's index by prefix and key, as memoryStore keeps it (see KeySpace there), and what
  // forgetting a slot must remove from it.
  const spaces = new Map<string, Map<string, number>>();
  const unindex: ((() => void) | undefined)[] = [];
  function takeOneSync(prefix: string, key: string, limit: LimitStep): number {
    const now = originUs + Math.floor(perf.now() * 1000);
    if (key.length >= ROPE_MIN_LENGTH) key = flattened(key);
    let space = spaces.get(prefix);
    let found = space?.get(key);
    let storageKey = '';
    if (found === undefined) {
      storageKey = flattened(prefix + key);
      found = slots.get(storageKey);
    }
    const more = found === undefined || several.size === 0 ? undefined : several.get(found);
    const stored = found === undefined ? 0 : (more?.[0] ?? nums[found + 1]!);
    const after = takeUnits(found === undefined ? 0 : decayed(stored, nums[found]!, now, limit.refillUnitsPerUs), limit);
    if (after < 0) return after;
    const at = slotFor(storageKey, found);
    if (several.size !== 0) several.delete(at);
    nums[at] = now;
    nums[at + 1] = after;
    // Indexed the second time a take reaches it, as memoryStore does.
    if (storageKey !== '' && found !== undefined && unindex[at / 2] === undefined) {
      if (space === undefined) spaces.set(prefix, (space = new Map()));
      const rest = ownCopy(key);
      const inSpace = space;
      inSpace.set(rest, at);
      unindex[at / 2] = () => inSpace.delete(rest);
    }
    return after;
  }
  function forget(key: string): void {
    const at = slots.get(key);
    if (at === undefined) return;
    slots.delete(key);
    several.delete(at);
    unindex[at / 2]?.();
    unindex[at / 2] = undefined;
  }
  // A dropped bucket's slot is not reused: this store is only for measuring.
  return { name: 'memory-unbounded', inProcess: true, stepSync, takeOneSync, step: async (k, a) => stepSync(k, a), reset: async (k) => forget(k), ping: async () => {} };
}

type Module = { createLimiter: typeof createLimiter; memoryStore: typeof memoryStore };

/** src/ of git revision `rev`, unpacked into a temporary directory and imported. */
async function srcAt(rev: string): Promise<Module> {
  const root = fileURLToPath(new URL('..', import.meta.url));
  const dir = mkdtempSync(join(tmpdir(), 'memory-ab-'));
  execFileSync('sh', ['-c', `git archive "$1" src | tar -x -C "$2"`, 'sh', rev, dir], { cwd: root });
  return (await import(pathToFileURL(join(dir, 'src', 'index.ts')).href)) as Module;
}

const previous = opt.against ? await srcAt(opt.against) : undefined;

/**
 * Decisions per second of one run: of wall time, or with --cpu of this process's CPU time (user and
 * system), which a machine busy with other work disturbs far less than the wall clock.
 */
async function rate(op: (i: number) => Promise<unknown>): Promise<number> {
  if (!opt.cpu) return (await measure(n, 1, op)).opsPerSec;
  const c0 = process.cpuUsage();
  await measure(n, 1, op);
  const c = process.cpuUsage(c0);
  return n / ((c.user + c.system) / 1e6);
}
for (const keys of keyCounts) {
  const rlf = new RateLimiterMemory({ points: HUGE.capacity, duration: 60 });
  const limiterOn = (store: Store) => createLimiter({ store, policies: { bench: HUGE } });
  const ours = limiterOn(memoryStore());
  const unbounded = limiterOn(unboundedStore());
  const impls: Record<string, (i: number) => Promise<unknown>> = {
    'edge-limiter memoryStore': (i) => ours.take('bench', `k${i % keys}`),
    'rate-limiter-flexible RateLimiterMemory': (i) => rlf.consume(`k${i % keys}`),
    'ours on an unbounded store (no maxKeys)': (i) => unbounded.take('bench', `k${i % keys}`),
  };
  if (previous) {
    const before = previous.createLimiter({ store: previous.memoryStore(), policies: { bench: HUGE } });
    impls[`ours at ${opt.against}`] = (i) => before.take('bench', `k${i % keys}`);
  }
  impls['the loop alone'] = () => Promise.resolve();
  const names = Object.keys(impls);
  for (const name of names) await measure(n, 1, impls[name]!); // warm up: compile, and fill the buckets
  const perSec: Record<string, number[]> = Object.fromEntries(names.map((name) => [name, []]));
  for (let r = 0; r < rounds; r++) {
    const order = names.map((_, j) => names[(j + r) % names.length]!);
    for (const name of order) perSec[name]!.push(await rate(impls[name]!));
  }
  const peer = perSec['rate-limiter-flexible RateLimiterMemory']!;
  const loopNs = 1e9 / spread(perSec['the loop alone']!).median;
  console.log(`\n${keys} key(s): ${n} decisions per run, ${rounds} interleaved rounds after a warm-up run; medians (min–max over rounds)`);
  for (const name of names) {
    const ratio = spread(perSec[name]!.map((x, r) => x / peer[r]!));
    const ns = 1e9 / spread(perSec[name]!).median;
    console.log(`${name}: ÷ RateLimiterMemory ${ratio.median.toFixed(2)} (${ratio.min.toFixed(2)}–${ratio.max.toFixed(2)}), ${(ns - loopNs).toFixed(0)} ns beyond the loop (${ns.toFixed(0)} per iteration)`);
  }
  if (previous) {
    // The before/after itself, paired within each round (the rows ran back to back), so that drift in
    // the machine's load between rounds cancels out: time per decision now ÷ at the revision.
    const now = perSec['edge-limiter memoryStore']!;
    const then = perSec[`ours at ${opt.against}`]!;
    const cost = spread(now.map((x, r) => then[r]! / x));
    console.log(`time per decision, memoryStore now ÷ at ${opt.against}: ${cost.median.toFixed(3)} (${cost.min.toFixed(3)}–${cost.max.toFixed(3)} over rounds)`);
  }
}
