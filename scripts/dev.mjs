// `npm run dev`: runs the Worker locally in workerd (wrangler dev) on the in-memory store, with two
// development tokens, and prints a ready-to-paste curl line with the one that may only take permits.
//   npm run dev -- --upstash      the same Worker against a real Redis through the local Upstash-compatible server
//   npm run dev -- --durable-object   the same Worker on the Durable Object store (local objects in workerd)
//   npm run dev -- --var NAME:VALUE ...   extra Worker variables (repeatable)
//   npm run dev -- --port 9000            listen there (also --port=9000; default PORT or 8787)
//   npm run dev -- --trust-cf-connecting-ip   key by the CF-Connecting-IP each request carries, as Cloudflare's
//                                         would be (for tests that play many clients); otherwise every request
//                                         is from 127.0.0.1, where wrangler dev listens (DEV_PEER_IP): Miniflare
//                                         keeps a CF-Connecting-IP the client sent, so a client could choose its bucket
// Environment: PORT (default 8787), PERMIT_TOKENS (default DEV_TOKENS: dev-permit-token, permit only, and
// dev-admin-secret, every right).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);

/** Starts scripts/upstash-stack.ts (redis-server + local Upstash REST server) and reads its JSON line. */
function startUpstashStack() {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'upstash-stack.ts')], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.on('exit', (code) => reject(new Error(`upstash stack exited ${code}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) {
        const info = JSON.parse(line);
        const exited = new Promise((r) => child.once('exit', r));
        resolve({ ...info, stop: async () => (child.kill('SIGTERM'), exited) });
      }
    });
  });
}
const wrangler = join(dirname(require.resolve('wrangler/package.json')), 'bin/wrangler.js');
let port = process.env.PORT ?? '8787';
/** Least privilege by default: the printed token may take permits and nothing else. */
const DEV_TOKENS = [
  { name: 'dev-permit', secret: 'dev-permit-token', policies: '*', rights: ['permit'] },
  { name: 'dev-admin', secret: 'dev-admin-secret', policies: '*', rights: ['permit', 'settle', 'admin', 'stats'] },
];
const tokens = process.env.PERMIT_TOKENS || JSON.stringify(DEV_TOKENS);

/**
 * The token and policy for the curl line: of scoped tokens (JSON), the first plain one with only the
 * permit right, else the first plain one with it; of comma-separated ones, the first. None (only
 * hashed secrets): the line asks for $TOKEN.
 */
function curlToken() {
  if (!tokens.trim().startsWith('[')) return { token: tokens.split(',')[0].trim(), policy: 'default' };
  let list = [];
  try {
    list = JSON.parse(tokens);
  } catch {}
  const plain = (Array.isArray(list) ? list : []).filter((t) => typeof t?.secret === 'string' && !t.secret.startsWith('sha256:') && t.rights?.includes?.('permit'));
  const t = plain.find((x) => x.rights.length === 1) ?? plain[0];
  if (!t) return { token: '${TOKEN:?set TOKEN to a token with the permit right}', policy: 'default' };
  return { token: t.secret, policy: Array.isArray(t.policies) ? t.policies[0] : 'default' };
}
const curl = curlToken();
const argv = process.argv.slice(2);
const extra = [];
const cleanups = [];
let storeLabel = 'the in-memory store';
/** wrangler dev listens here only, so every request comes from this machine. */
const LISTEN_IP = '127.0.0.1';
let trustHeader = false;

for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--var' && argv[i + 1]) extra.push('--var', argv[++i]);
  else if (argv[i] === '--port' || argv[i].startsWith('--port=')) {
    const value = argv[i] === '--port' ? argv[++i] : argv[i].slice('--port='.length);
    if (!/^\d{1,5}$/.test(value ?? '') || Number(value) < 1 || Number(value) > 65535) {
      console.error(`--port must be a port number from 1 to 65535, got ${JSON.stringify(value ?? '')}`);
      process.exit(2);
    }
    port = value;
  }
  else if (argv[i] === '--trust-cf-connecting-ip') trustHeader = true;
  else if (argv[i] === '--durable-object') {
    extra.push('--var', 'LIMITER_STORE:durable-object');
    storeLabel = 'the Durable Object store (RateLimiterObject, local in workerd)';
  } else if (argv[i] === '--upstash') {
    const stack = await startUpstashStack();
    cleanups.push(stack.stop);
    extra.push('--var', 'LIMITER_STORE:upstash', '--var', `UPSTASH_REDIS_REST_URL:${stack.url}`, '--var', `UPSTASH_REDIS_REST_TOKEN:${stack.token}`);
    storeLabel = `Redis ${stack.redisUrl} through the local Upstash REST server ${stack.url}`;
  } else {
    console.error(`unknown argument ${argv[i]} (known: --upstash, --durable-object, --port N, --var NAME:VALUE, --trust-cf-connecting-ip)`);
    process.exit(2);
  }
}

const args = [wrangler, 'dev', '--ip', LISTEN_IP, '--port', port, '--inspector-port', process.env.INSPECTOR_PORT ?? '0', '--var', `PERMIT_TOKENS:${tokens}`];
if (!trustHeader) args.push('--var', `DEV_PEER_IP:${LISTEN_IP}`);
args.push(...extra);
const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, WRANGLER_SEND_METRICS: 'false' } });
let announced = false;
child.stdout.on('data', (chunk) => {
  process.stdout.write(chunk);
  if (!announced && /Ready on/i.test(chunk.toString())) {
    announced = true;
    const body = JSON.stringify({ policy: curl.policy, key: 'user-1' });
    const quote = curl.token.startsWith('$') ? '"' : "'";
    console.log(
      `\nedge-limiter is up on ${storeLabel}. Try, with a token that may only take permits:\n\n` +
        `curl -i -X POST http://127.0.0.1:${port}/v1/permits -H ${quote}Authorization: Bearer ${curl.token}${quote} -H 'Content-Type: application/json' -d '${body}'\n` +
        (process.env.PERMIT_TOKENS ? '' : `\nResets, free-form adjustments and /v1/stats need the admin or stats right: dev-admin-secret has every right (docs/security.md).\n`),
    );
  }
});
const stop = async (sig) => {
  child.kill(sig);
};
process.on('SIGINT', () => void stop('SIGINT'));
process.on('SIGTERM', () => void stop('SIGTERM'));
child.on('exit', async (code) => {
  for (const c of cleanups) await c().catch(() => {});
  process.exit(code ?? 0);
});
