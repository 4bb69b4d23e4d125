// Gateway mode streams request bodies: a 200 MB upload through the Node entry (functions/node.ts, a
// process of its own) to an origin that reads and discards it, with the gateway process's resident
// memory sampled from outside. Before, Node's fetch cloned the request and the unread copy of the body
// held the whole upload: the RSS grew by the body's size.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNodeServer, type NodeServer } from '../support/node-server.js';

const MB = 1024 * 1024;
const UPLOAD = 200 * MB;
/** The most the gateway's RSS may grow above its warmed-up level while forwarding 200 MB (docs/gateway.md). */
const GROWTH_BOUND_MB = 64;

let origin: Server;
let gateway: NodeServer;
const received: number[] = [];

/** Resident memory of a process in bytes: /proc on Linux, `ps` elsewhere. */
function rssOf(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    if (m) return Number(m[1]) * 1024;
  } catch {
    // no /proc
  }
  return Number(execFileSync('ps', ['-o', 'rss=', '-p', String(pid)]).toString().trim()) * 1024;
}

/** Samples `pid`'s RSS every 10 ms while `work` runs; returns the peak. */
async function peakRss<T>(pid: number, work: () => Promise<T>): Promise<{ peak: number; result: T }> {
  let peak = rssOf(pid);
  const timer = setInterval(() => (peak = Math.max(peak, rssOf(pid))), 10);
  try {
    const result = await work();
    peak = Math.max(peak, rssOf(pid));
    return { peak, result };
  } finally {
    clearInterval(timer);
  }
}

/** A generated body of `total` bytes in 64 KiB chunks (nothing of it is held by the test). */
function generated(total: number): Readable {
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  let sent = 0;
  return new Readable({
    read() {
      if (sent >= total) return void this.push(null);
      const n = Math.min(chunk.length, total - sent);
      sent += n;
      this.push(n === chunk.length ? chunk : chunk.subarray(0, n));
    },
  });
}

function upload(total: number, withLength: boolean): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: gateway.port, path: '/upload', method: 'POST', agent: false, headers: withLength ? { 'Content-Length': String(total) } : {} },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      },
    );
    req.on('error', reject);
    generated(total).pipe(req);
  });
}

beforeAll(async () => {
  origin = createServer((req, res) => {
    let n = 0;
    req.on('data', (d: Buffer) => (n += d.length));
    req.on('end', () => {
      received.push(n);
      res.end(String(n));
    });
  });
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', () => r()));
  gateway = await startNodeServer({
    LIMITER_STORE: 'memory',
    LIMITER_POLICIES: JSON.stringify({ gate: { capacity: 1000, refillPerSecond: 100 } }),
    GATE_ORIGIN: `http://127.0.0.1:${(origin.address() as { port: number }).port}`,
  });
}, 60_000);

afterAll(async () => {
  await gateway?.stop();
  await new Promise<void>((r) => origin.close(() => r()));
});

describe('gateway request bodies in bounded memory', () => {
  it(`a 200 MB upload (with a Content-Length, then chunked) grows the gateway's RSS by less than ${GROWTH_BOUND_MB} MB`, { timeout: 120_000 }, async () => {
    const pid = gateway.process.pid!;
    // Warm up every path a forward takes, so the baseline is not start-up's.
    for (let i = 0; i < 3; i++) expect((await upload(8 * MB, i % 2 === 0)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 500));
    const baseline = rssOf(pid);
    for (const withLength of [true, false]) {
      const { peak, result } = await peakRss(pid, () => upload(UPLOAD, withLength));
      console.log(`[gateway ${UPLOAD / MB} MB upload, ${withLength ? 'Content-Length' : 'chunked'}] RSS baseline ${(baseline / MB).toFixed(0)} MB, peak ${(peak / MB).toFixed(0)} MB (+${((peak - baseline) / MB).toFixed(0)} MB)`);
      expect(result).toEqual({ status: 200, body: String(UPLOAD) });
      expect(received.at(-1)).toBe(UPLOAD);
      expect((peak - baseline) / MB).toBeLessThan(GROWTH_BOUND_MB);
    }
  });
});
