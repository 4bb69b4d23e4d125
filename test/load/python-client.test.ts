// The Python client (clients/python) against the real server: a redis-server, two `npm start` servers on
// it, and one whose Redis does not answer (its policies fail closed and open). Runs the client's unittest
// suites on Debian's python3 (scripts/lib/tools.ts: `npm test` installs the modules they need), its
// contention run (scored here too, by bench/accuracy.ts, which must agree with the Python port), mypy
// --strict over the package and the examples, and each example. A failure shows the Python output.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { score, type WorkerResult } from '../../bench/accuracy.js';
import { freePort, startRedis, type RedisProcess } from '../../scripts/lib/redis-server.js';
import { installLine, missingPythonModules, pythonPath, TOOLS } from '../../scripts/lib/tools.js';
import { startNodeServer, type NodeServer } from '../support/node-server.js';

const python = pythonPath();
const client = fileURLToPath(new URL('../../clients/python', import.meta.url));
const TOKEN = 'python-client-token-7d1e';
const NARROW_TOKEN = 'python-narrow-token-5c2a';
const NO_REFILL = 1 / 3600;
const POLICIES = {
  api: { capacity: 10, refillPerSecond: NO_REFILL },
  llm: { limits: { requests: { capacity: 10, refillPerSecond: NO_REFILL }, tokens: { capacity: 1000, refillPerSecond: NO_REFILL } } },
  // One token every 200 ms: reservations.
  paced: { capacity: 1, refillPerSecond: 5 },
  contention: { capacity: 20, refillPerSecond: 100 },
  // The examples: three permits, then refusals; and a burst of two, then one every 100 ms.
  example: { capacity: 3, refillPerSecond: NO_REFILL },
  'example-paced': { capacity: 2, refillPerSecond: 10 },
  // A policy-wide change of limits (runtime limits), set and cleared by the contract tests alone.
  wide: { capacity: 5, refillPerSecond: 1 },
};
const DOWN_POLICIES = {
  closed: { capacity: 10, refillPerSecond: 1, onStoreError: 'deny' },
  open: { capacity: 10, refillPerSecond: 1, onStoreError: 'allow' },
};

let redis: RedisProcess | undefined;
const servers: NodeServer[] = [];
let down: NodeServer | undefined;
let tmp: string;

/** Runs Debian's python3 in clients/python; stdout and stderr together, as they came. */
function runPython(args: string[], env: Record<string, string> = {}, timeoutMs = 100_000): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(python, args, {
      cwd: client,
      env: {
        ...process.env,
        PYTHONPATH: [join(client, 'src'), join(client, 'tests')].join(delimiter),
        PYTHONDONTWRITEBYTECODE: '1',
        PYTHONUNBUFFERED: '1',
        EDGE_LIMITER_URLS: servers.map((s) => s.url).join(','),
        EDGE_LIMITER_TOKEN: TOKEN,
        EDGE_LIMITER_NARROW_TOKEN: NARROW_TOKEN,
        EDGE_LIMITER_POLICIES: JSON.stringify(POLICIES),
        EDGE_LIMITER_DOWN_URL: down!.url,
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

/** A unittest module's run: exit 0, at least one test, none skipped. */
async function unittest(module: string, env: Record<string, string> = {}): Promise<string> {
  const { code, out } = await runPython(['-m', 'unittest', '-v', `tests.${module}`], env);
  expect(code, out).toBe(0);
  expect(out, out).toMatch(/^Ran [1-9]\d* tests? in /m);
  expect(out, out).toMatch(/^OK$/m);
  expect(out, out).not.toMatch(/skipped/i);
  return out;
}

beforeAll(async () => {
  const modules = TOOLS.filter((t) => t.python);
  const absent = missingPythonModules(modules.map((t) => t.bin), python);
  if (absent.size > 0) throw new Error(installLine(modules.filter((t) => absent.has(t.bin))));
  tmp = mkdtempSync(join(tmpdir(), 'edge-limiter-python-'));
  redis = await startRedis();
  const tokens = [
    { name: 'python', secret: TOKEN, policies: '*', rights: ['permit', 'settle', 'admin', 'stats'] },
    { name: 'python-narrow', secret: NARROW_TOKEN, policies: ['api'], rights: ['permit'] },
  ];
  const env = { REDIS_URL: redis.url, PERMIT_TOKENS: JSON.stringify(tokens), LIMITER_POLICIES: JSON.stringify(POLICIES) };
  servers.push(await startNodeServer(env), await startNodeServer(env));
  // Nothing listens on this port: every decision is a store error.
  down = await startNodeServer({ REDIS_URL: `redis://127.0.0.1:${await freePort()}`, PERMIT_TOKENS: TOKEN, LIMITER_POLICIES: JSON.stringify(DOWN_POLICIES) });
}, 90_000);

afterAll(async () => {
  for (const s of [...servers, down]) if (s) expect(await s.stop()).toBe(0);
  await redis?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('the Python client against the real server', () => {
  for (const module of ['test_validation', 'test_operations', 'test_hostile', 'test_retry', 'test_redirect', 'test_settle', 'test_wire', 'test_package']) {
    it(`python -m unittest tests.${module}`, async () => {
      await unittest(module);
    });
  }

  it('4 Python processes x 16 threads through two servers: 0 over, 0 under in every window, by both judges', async () => {
    const file = join(tmp, 'contention.json');
    const out = await unittest('test_contention', { EDGE_LIMITER_CONTENTION_OUT: file });
    console.log(/\[python contention\][^\n]*/.exec(out)?.[0]);
    const { results, score: python } = JSON.parse(readFileSync(file, 'utf8')) as { results: WorkerResult[]; score: Record<string, number> };
    const a = score(results, POLICIES.contention);
    expect(a.errors).toBe(0);
    expect(a.windowOver).toBe(0);
    expect(a.windowUnder).toBe(0);
    expect(a.admitted).toBeLessThanOrEqual(Math.floor(a.idealMax));
    expect(a.admitted).toBeGreaterThanOrEqual(Math.floor(a.idealMin - 1));
    // The Python port of the judgement says what bench/accuracy.ts says.
    expect(python).toMatchObject({ admitted: a.admitted, decisions: a.decisions, errors: a.errors, windowOver: a.windowOver, windowUnder: a.windowUnder });
    expect(python.idealMin).toBeCloseTo(a.idealMin, 6);
    expect(python.idealMax).toBeCloseTo(a.idealMax, 6);
  });

  it("mypy --strict: the package (for Python 3.9 and up) and the examples", async () => {
    const pkg = await runPython(['-m', 'mypy', '--strict', '--cache-dir', '/dev/null', 'src']);
    expect(pkg.code, pkg.out).toBe(0);
    expect(pkg.out).toMatch(/^Success: no issues found in \d+ source files/m);
    // Celery ships no type hints (--ignore-missing-imports); the rest is checked as a user's code would be.
    const examples = await runPython(['-m', 'mypy', '--strict', '--cache-dir', '/dev/null', '--ignore-missing-imports', 'examples'], { MYPYPATH: join(client, 'src') });
    expect(examples.code, examples.out).toBe(0);
    expect(examples.out).toMatch(/^Success: no issues found in 3 source files/m);
  });
});

describe('the examples run against the server', () => {
  const example = async (file: string, policy: string) => {
    const { code, out } = await runPython([`examples/${file}`], { EDGE_LIMITER_URL: servers[0]!.url, PERMIT_TOKEN: TOKEN, EDGE_LIMITER_POLICY: policy, PYTHONPATH: join(client, 'src') });
    expect(code, out).toBe(0);
    return out;
  };

  it('celery_task.py: a task pre-check takes three permits, then a task is refused and put back with the countdown', async () => {
    const out = await example('celery_task.py', 'example');
    expect(out).toMatch(/^task 1: synced account-\w+ \(permits left: 2\)$/m);
    expect(out).toMatch(/^task 3: synced account-\w+ \(permits left: 0\)$/m);
    expect(out).toMatch(/^task 4: refused \(no permit for account-\w+; tokens exist in \d+\.\d s\), retried in \d+\.\d s$/m);
  });

  it('aiohttp_session.py: each request waits for its permit in turn, and one that may not wait is refused unsent', async () => {
    const out = await example('aiohttp_session.py', 'example-paced');
    const at = [...out.matchAll(/^GET \/items\/(\d) -> 200 \{'item': '\1'\} at (\d+\.\d+) s$/gm)].map((m) => Number(m[2])).sort((a, b) => a - b);
    expect(at, out).toHaveLength(5);
    // A burst of two, then one every 100 ms: the fifth comes about 300 ms after the first.
    expect(at[4]! - at[0]!, out).toBeGreaterThanOrEqual(0.27);
    expect(out).toMatch(/^GET \/items\/6 refused: no permit within 0 ms; tokens exist in \d+ ms$/m);
  });

  it("fastapi_dependency.py: the dependency answers 429 with the permit server's headers", async () => {
    const out = await example('fastapi_dependency.py', 'example');
    expect(out).toMatch(/^request 1: 200 \{'reports': \['q1', 'q2'\], 'permits_left': 2\}$/m);
    expect(out).toMatch(/^request 4: 429 \{'detail': 'rate limited; retry in \d+ ms'\}$/m);
    expect(out).toMatch(/^ {2}RateLimit: "example";r=0;t=\d+$/m);
    expect(out).toMatch(/^ {2}RateLimit-Policy: "example";q=3;w=\d+$/m);
    expect(out).toMatch(/^ {2}Retry-After: \d+$/m);
  });
});
