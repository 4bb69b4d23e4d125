// Where an HTTP server mode's CPU goes, against another: `node --import tsx bench/http-profile.ts <base> <mode> [requests]`
// (modes of bench/http-server.ts). Runs each server under `node --cpu-prof`, drives it with rawLoad
// (a warm-up of a fifth of the requests, then the requests), and prints the busy (non-idle) µs per
// request of each, then the functions whose self time per request differs most. One run of each, so
// repeat it before trusting a difference of a microsecond or two on a noisy machine.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { printDiff, selfTimes } from './cpu-profile.js';
import { rawLoad, startHttpServer } from './http-load.js';

const [base, mode] = process.argv.slice(2, 4);
if (!base || !mode) throw new Error('usage: bench/http-profile.ts <base mode> <mode> [requests]');
const requests = Number(process.argv[4] ?? 150_000);
const warmup = Math.ceil(requests / 5);

/** Self time by function over the whole run of one server. */
async function profile(m: string): Promise<Map<string, number>> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-limiter-prof-'));
  try {
    const { child, port } = await startHttpServer(m, ['--cpu-prof', `--cpu-prof-dir=${dir}`]);
    await rawLoad(port, warmup);
    await rawLoad(port, requests);
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGINT');
    await exited;
    return selfTimes(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

printDiff({ label: base, times: await profile(base) }, { label: mode, times: await profile(mode) }, requests + warmup, 'request');
