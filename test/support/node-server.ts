// Starts functions/node.ts (what `npm start` runs) as a real process on a free port.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../scripts/lib/redis-server.js';

const entry = fileURLToPath(new URL('../../functions/node.ts', import.meta.url));

export interface NodeServer {
  url: string;
  port: number;
  process: ChildProcess;
  output(): string;
  /** SIGTERM, and resolves with the exit code. */
  stop(): Promise<number | null>;
}

export async function startNodeServer(env: Record<string, string>): Promise<NodeServer> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', entry], {
    env: { ...process.env, ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const deadline = Date.now() + 30_000;
  while (!out.includes('"msg":"listening"')) {
    if (child.exitCode !== null) throw new Error(`node server exited ${child.exitCode}: ${out}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`node server did not start: ${out}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    process: child,
    output: () => out,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}
