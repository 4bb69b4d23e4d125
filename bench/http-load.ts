// The HTTP benchmark's two processes, shared by bench/run.ts and bench/http-ab.ts: a server of
// bench/http-server.ts in one of its modes, and autocannon in its own process (the server under test
// must not share its CPU time slice with the load generator).
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { connect } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Throughput } from './lib.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const run = promisify(execFile);

/** Starts bench/http-server.ts in `mode` (see there), with `nodeArgs` (e.g. `--cpu-prof`) before its own. */
export async function startHttpServer(mode: string, nodeArgs: string[] = []): Promise<{ port: number; child: ChildProcess }> {
  const child = spawn(process.execPath, [...nodeArgs, '--import', 'tsx', join(root, 'bench/http-server.ts'), mode], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      const m = /listening (\d+)/.exec(String(d));
      if (m) resolve(Number(m[1]));
    });
    child.once('exit', (code) => reject(new Error(`http server ${mode} exited ${code}`)));
  });
  return { port, child };
}

/** `GET /hello` with 50 connections for `seconds`; throws if any response was not 2xx. */
export async function autocannon(port: number, seconds: number): Promise<Throughput> {
  const { stdout } = await run(process.execPath, [join(root, 'node_modules/autocannon/autocannon.js'), '-c', '50', '-d', String(seconds), '-j', `http://127.0.0.1:${port}/hello`], { maxBuffer: 1 << 24 });
  const r = JSON.parse(stdout) as { requests: { total: number }; latency: { p50: number; p99: number }; non2xx: number; errors: number };
  if (r.non2xx || r.errors) throw new Error(`autocannon saw ${r.non2xx} non-2xx and ${r.errors} errors`);
  return { opsPerSec: r.requests.total / seconds, p50Ms: r.latency.p50, p99Ms: r.latency.p99 };
}

/** The server's own CPU time so far (user + system), in µs, asked over its IPC channel. */
export function serverCpuUs(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    child.once('message', (m) => {
      const u = m as NodeJS.CpuUsage;
      resolve(u.user + u.system);
    });
    child.send('cpu');
  });
}

/**
 * `GET /hello` `total` times over `connections` keep-alive sockets, one request in flight on each, from
 * this process. A load generator that does not parse responses: it finds each one by its status line
 * and checks that it is a 200, so its cost per response hardly depends on the headers, unlike
 * autocannon's. For measuring the server's CPU per request, not for latency.
 */
export function rawLoad(port: number, total: number, connections = 16): Promise<void> {
  const request = Buffer.from('GET /hello HTTP/1.1\r\nHost: bench\r\n\r\n');
  const marker = 'HTTP/1.1 ';
  return new Promise((resolve, reject) => {
    let sent = 0;
    let done = 0;
    let open = connections;
    let failed: Error | undefined;
    const sockets = Array.from({ length: connections }, () => connect(port, '127.0.0.1'));
    const fail = (err: Error) => {
      failed ??= err;
      for (const s of sockets) s.destroy();
    };
    for (const socket of sockets) {
      socket.setNoDelay(true);
      const send = () => {
        if (sent < total) {
          sent++;
          socket.write(request);
        } else socket.end();
      };
      // What may still hold the start of a status line split across two reads.
      let pending = '';
      socket.on('connect', send);
      socket.on('data', (chunk: Buffer) => {
        pending += chunk.toString('latin1');
        for (;;) {
          const at = pending.indexOf(marker);
          if (at === -1) {
            pending = pending.slice(-(marker.length - 1));
            return;
          }
          const end = at + marker.length + 3;
          if (end > pending.length) {
            pending = pending.slice(at);
            return;
          }
          const status = pending.slice(at + marker.length, end);
          if (status !== '200') return fail(new Error(`rawLoad: the server answered ${status}`));
          pending = pending.slice(end);
          done++;
          send();
        }
      });
      socket.on('error', fail);
      socket.on('close', () => {
        if (--open > 0) return;
        if (failed) reject(failed);
        else if (done < total) reject(new Error(`rawLoad: ${done} of ${total} responses`));
        else resolve();
      });
    }
  });
}
