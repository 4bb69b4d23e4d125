// `npm run dev`: runs the Worker locally in workerd (wrangler dev) on the in-memory store, with a
// development token, and prints a ready-to-paste curl line. `npm run dev -- --upstash` runs it against
// a real Redis through the local Upstash-compatible server instead (see README).
import { spawn } from 'node:child_process';

const port = process.env.PORT ?? '8787';
const token = process.env.PERMIT_TOKENS ?? 'dev-token';
const extraVars = [];
const args = ['dev', '--ip', '127.0.0.1', '--port', port, '--var', `PERMIT_TOKENS:${token}`, ...extraVars];

const child = spawn('wrangler', args, { stdio: ['inherit', 'pipe', 'inherit'], env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } });
let announced = false;
child.stdout.on('data', (chunk) => {
  process.stdout.write(chunk);
  if (!announced && /Ready on/i.test(chunk.toString())) {
    announced = true;
    const body = JSON.stringify({ policy: 'default', key: 'user-1' });
    console.log(`\nedge-limiter is up on the in-memory store. Try:\n\n  curl -i -X POST http://127.0.0.1:${port}/v1/permits -H 'Authorization: Bearer ${token}' -H 'Content-Type: application/json' -d '${body}'\n`);
  }
});
const stop = (sig) => child.kill(sig);
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGTERM', () => stop('SIGTERM'));
child.on('exit', (code) => process.exit(code ?? 0));
