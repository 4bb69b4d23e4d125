// Starts a real redis-server on a free loopback port with no persistence, for tests and benchmarks.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, connect } from 'node:net';

export interface RedisProcess {
  port: number;
  url: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/** Sends one inline command and resolves with the first reply line (enough for PING / readiness). */
export function rawCommand(port: number, command: string, timeoutMs = 1000): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`redis on ${port}: no reply to ${command}`));
    }, timeoutMs);
    let buf = '';
    sock.on('connect', () => sock.write(`${command}\r\n`));
    sock.on('data', (d) => {
      buf += d.toString();
      if (buf.includes('\r\n')) {
        clearTimeout(timer);
        sock.end();
        resolve(buf.split('\r\n')[0]!);
      }
    });
    sock.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

export async function waitForRedis(port: number, deadlineMs = 10_000): Promise<void> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    try {
      if ((await rawCommand(port, 'PING', 500)) === '+PONG') return;
    } catch {
      // not up yet
    }
    if (Date.now() > until) throw new Error(`redis-server on port ${port} did not answer PING within ${deadlineMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Spawns redis-server. `extraArgs` are passed through, e.g. ['--rename-command', 'TIME', ''].
 * `addressSpaceMiB` caps the server's virtual memory (ulimit -v), for a test that may make a script
 * allocate without bound: such a script then fails for want of memory instead of taking the machine's.
 */
export async function startRedis(opts: { port?: number; extraArgs?: string[]; addressSpaceMiB?: number } = {}): Promise<RedisProcess> {
  const port = opts.port ?? (await freePort());
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--protected-mode', 'no', ...(opts.extraArgs ?? [])];
  const child =
    opts.addressSpaceMiB === undefined
      ? spawn('redis-server', args, { stdio: ['ignore', 'ignore', 'pipe'] })
      : spawn('/bin/sh', ['-c', `ulimit -v ${opts.addressSpaceMiB * 1024} && exec redis-server "$@"`, 'redis-server', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (d) => (stderr += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('error', (e) => {
    stderr += String(e);
  });
  try {
    await waitForRedis(port);
  } catch (e) {
    child.kill('SIGKILL');
    throw new Error(`${(e as Error).message}${stderr ? `: ${stderr}` : ''} (is redis-server installed? npm test installs it, or says how: scripts/test-tools.ts)`);
  }
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    process: child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGCONT');
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 3000);
        await exited;
        clearTimeout(t);
      }
    },
  };
}

export interface RedisCluster {
  nodes: RedisProcess[];
  stop(): Promise<void>;
}

/**
 * A real Redis Cluster of `masters` nodes (no replicas, no persistence) on free loopback ports: each
 * node with cluster mode on, joined by `redis-cli --cluster create`, ready when every node says
 * cluster_state:ok.
 */
export async function startRedisCluster(masters = 3): Promise<RedisCluster> {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { execFile } = await import('node:child_process');
  const dir = mkdtempSync(join(tmpdir(), 'edge-limiter-cluster-'));
  const nodes: RedisProcess[] = [];
  const stop = async () => {
    await Promise.all(nodes.map((n) => n.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < masters; i++) {
      const port = await freePort();
      nodes.push(await startRedis({ port, extraArgs: ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`), '--dir', dir] }));
    }
    await new Promise<void>((resolve, reject) =>
      execFile('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'], { timeout: 30_000 }, (err, _out, stderr) =>
        err ? reject(new Error(`redis-cli --cluster create failed: ${stderr || err.message}`)) : resolve(),
      ),
    );
    const until = Date.now() + 20_000;
    for (const n of nodes) {
      while (!/cluster_state:ok/.test(await clusterInfo(n.port))) {
        if (Date.now() > until) throw new Error(`cluster node ${n.port} did not reach cluster_state:ok`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { nodes, stop };
}

/** CLUSTER INFO's bulk reply, read whole (rawCommand returns only the first line). */
function clusterInfo(port: number): Promise<string> {
  return new Promise((resolve) => {
    const sock = connect(port, '127.0.0.1');
    let buf = '';
    const done = () => {
      sock.destroy();
      resolve(buf);
    };
    const timer = setTimeout(done, 1000);
    sock.on('connect', () => sock.write('CLUSTER INFO\r\n'));
    sock.on('data', (d) => {
      buf += d.toString();
      if (/cluster_state:\w+/.test(buf)) {
        clearTimeout(timer);
        done();
      }
    });
    sock.on('error', () => {
      clearTimeout(timer);
      done();
    });
  });
}
