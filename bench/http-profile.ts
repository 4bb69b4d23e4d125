// Where an HTTP server mode's CPU goes, against another: `node --import tsx bench/http-profile.ts <base> <mode> [requests]`
// (modes of bench/http-server.ts). Runs each server under `node --cpu-prof`, drives it with rawLoad
// (a warm-up of a fifth of the requests, then the requests), and prints the busy (non-idle) µs per
// request of each, then the functions whose self time per request differs most. One run of each, so
// repeat it before trusting a difference of a microsecond or two on a noisy machine.
import { printDiff, profiled } from './cpu-profile.js';
import { rawLoad, startHttpServer } from './http-load.js';

const [base, mode] = process.argv.slice(2, 4);
if (!base || !mode) throw new Error('usage: bench/http-profile.ts <base mode> <mode> [requests]');
const requests = Number(process.argv[4] ?? 150_000);
const warmup = Math.ceil(requests / 5);

/** Self time by function over the whole run of one server. */
const profile = (m: string) =>
  profiled(async (nodeArgs) => {
    const { child, port } = await startHttpServer(m, nodeArgs);
    await rawLoad(port, warmup);
    await rawLoad(port, requests);
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGINT');
    await exited;
  });

printDiff({ label: base, times: await profile(base) }, { label: mode, times: await profile(mode) }, requests + warmup, 'request');
