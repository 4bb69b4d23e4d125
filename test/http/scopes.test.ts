// Scoped tokens (issue 32, item 1) on every entry as deployed: every route × every right × in and out of
// the token's policies (test/support/scope-matrix.ts) on the Node server (npm start), inside workerd
// (npm run dev) and through the Lambda handler with each real event shape.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ROUTE_RIGHTS } from '../../src/http/auth.js';
import { MATRIX_ENV, ROUTES, SECRETS, runMatrix, fetchSend, type Send } from '../support/scope-matrix.js';
import { freePort } from '../../scripts/lib/redis-server.js';
import { startNodeServer, type NodeServer } from '../support/node-server.js';
import { startDevWorker, type DevWorker } from '../support/worker.js';
import { KINDS, context, lambdaEvent, loadLambda, resultBytes } from '../support/lambda-events.js';

it('the matrix has a cell for every line of auth.ts\'s route table', () => {
  expect(new Set([...ROUTES.map((r) => r.table), 'GET /v1/stats'])).toEqual(new Set(Object.keys(ROUTE_RIGHTS)));
  for (const r of ROUTES) expect(r.right, r.route).toBe(ROUTE_RIGHTS[r.table]);
});

describe('the Node server', () => {
  let server: NodeServer;
  let metricsPort: number;
  beforeAll(async () => {
    metricsPort = await freePort();
    server = await startNodeServer({ ...MATRIX_ENV, METRICS_PORT: String(metricsPort) });
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
  });

  it('every route × right × policy: allowed or 403, and a 403 changed nothing', async () => {
    const { failures, cells } = await runMatrix(fetchSend(server.url), 'node');
    expect(failures).toEqual([]);
    expect(cells).toBeGreaterThan(70);
    // The administrative actions it allowed, counted by action and token name on the metrics port.
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    const counted = [...text.matchAll(/^edge_limiter_admin_actions_total\{action="([\w-]+)",token="([\w-]+)"\} (\d+)$/gm)].map((m) => `${m[1]} ${m[2]} ${m[3]}`);
    // Per allowed token and policy: a reset, an adjustment, a block and an unblock; limits set and cleared, policy-wide too.
    expect(counted.sort()).toEqual(
      ['adjust', 'reset', 'block', 'unblock', 'limits', 'policy-limits'].flatMap((a) => (a.includes('limits') ? [`${a} admin-api 2`, `${a} all 4`] : [`${a} admin-api 1`, `${a} all 2`])).sort(),
    );
  });

  it('its log names tokens and holds no secret, nor any prefix of one', () => {
    const out = server.output();
    expect(out).toContain('"token":"admin-api"');
    for (const secret of SECRETS) expect(out).not.toContain(secret.slice(0, 6));
  });
});

describe('the Worker in workerd', () => {
  let dev: DevWorker;
  beforeAll(async () => {
    dev = await startDevWorker(MATRIX_ENV);
  }, 120_000);
  afterAll(async () => {
    await dev?.stop();
  });

  it('every route × right × policy: allowed or 403, and a 403 changed nothing', async () => {
    const { failures, cells } = await runMatrix(fetchSend(dev.url), 'worker');
    expect(failures).toEqual([]);
    expect(cells).toBeGreaterThan(70);
    // The Worker's log (wrangler dev prints it) names tokens and holds no secret; the dev script's own
    // curl line shows a token with the permit right only, on purpose.
    const log = dev.output().replace(dev.curlLine(), '');
    expect(log).toContain('"token":"admin-api"');
    for (const secret of SECRETS) expect(log).not.toContain(secret.slice(0, 6));
    expect(dev.curlLine()).toContain('Bearer k7Q-permit-api-0001');
  });

  it('npm run dev without PERMIT_TOKENS prints a curl line whose token takes permits and may do nothing else', async () => {
    const plain = await startDevWorker();
    try {
      const line = plain.curlLine();
      const token = /Bearer ([^'"]+)/.exec(line)![1]!;
      const { stdout } = await promisify(execFile)('sh', ['-c', line]);
      expect(stdout).toMatch(/^HTTP\/1\.1 200 OK/);
      const send = fetchSend(plain.url);
      const as = (t: string) => `Bearer ${t}`;
      expect((await send({ method: 'DELETE', path: '/v1/buckets/default/user-1', authorization: as(token) })).body).toMatchObject({ status: 403, right: 'admin' });
      expect((await send({ method: 'POST', path: '/v1/adjustments', authorization: as(token), body: { policy: 'default', key: 'user-1', cost: -1 } })).body).toMatchObject({ status: 403, right: 'admin' });
      expect((await send({ method: 'GET', path: '/v1/stats', authorization: as(token) })).body).toMatchObject({ status: 403, right: 'stats' });
      // The admin token it names beside the line may.
      expect(plain.output()).toContain('dev-admin-secret has every right');
      expect((await send({ method: 'DELETE', path: '/v1/buckets/default/user-1', authorization: as('dev-admin-secret') })).status).toBe(204);
    } finally {
      await plain.stop();
    }
  }, 120_000);
});

describe('the Lambda handler', () => {
  for (const kind of KINDS) {
    it(`${kind} events: every route × right × policy: allowed or 403, and a 403 changed nothing`, async () => {
      const lines: string[] = [];
      for (const level of ['log', 'info', 'warn', 'error'] as const) vi.spyOn(console, level).mockImplementation((...a) => void lines.push(a.map(String).join(' ')));
      const handler = await loadLambda(MATRIX_ENV);
      const send: Send = async ({ method, path, authorization, body, idempotencyKey }) => {
        const headers: [string, string][] = [];
        if (idempotencyKey) headers.push(['Idempotency-Key', idempotencyKey]);
        if (authorization) headers.push(['Authorization', authorization]);
        if (body !== undefined) headers.push(['Content-Type', 'application/json']);
        const drop = authorization ? [] : ['authorization'];
        const result = await handler(lambdaEvent(kind, { method, path, headers, drop, ...(body === undefined ? {} : { body: JSON.stringify(body) }) }), context);
        const text = resultBytes(result).toString('utf8');
        return { status: result.statusCode, body: text ? JSON.parse(text) : undefined };
      };
      const { failures, cells } = await runMatrix(send, kind);
      vi.restoreAllMocks();
      expect(failures).toEqual([]);
      expect(cells).toBeGreaterThan(70);
      const log = lines.join('\n');
      expect(log).toContain('"msg":"audit","action":"reset","token":"all"');
      for (const secret of SECRETS) expect(log).not.toContain(secret.slice(0, 6));
    });
  }
});

describe('an invalid PERMIT_TOKENS on each entry: an error naming the token and field, never its secret', () => {
  const BAD = { LIMITER_STORE: 'memory', LIMITER_POLICIES: MATRIX_ENV.LIMITER_POLICIES, PERMIT_TOKENS: JSON.stringify([{ name: 'svc', secret: 'k7Q-bad-config-secret', policies: ['api'], rights: ['permit', 'root'] }]) };

  it('the Node server does not start', async () => {
    const err = await startNodeServer(BAD).then(
      (s) => (void s.stop(), undefined),
      (e: Error) => e,
    );
    expect(err?.message).toContain('PERMIT_TOKENS[0].rights[1]');
    expect(err?.message).not.toContain('k7Q-ba');
  });

  it('the Lambda handler fails its start and logs why', async () => {
    const lines: string[] = [];
    vi.spyOn(console, 'error').mockImplementation((...a) => void lines.push(a.map(String).join(' ')));
    const handler = await loadLambda(BAD);
    const failed = await handler(lambdaEvent('apigw-v2', { method: 'GET', path: '/healthz' }), context).catch((e: Error) => e);
    vi.restoreAllMocks();
    expect(failed).toBeInstanceOf(Error);
    expect(lines.join('\n')).toContain('PERMIT_TOKENS[0].rights[1]');
    expect(lines.join('\n')).not.toContain('k7Q-ba');
  });

  it('the Worker answers 500 server-misconfigured', async () => {
    const bad = await startDevWorker(BAD);
    try {
      const res = await fetch(`${bad.url}/healthz`);
      expect(res.status).toBe(500);
      const text = await res.text();
      expect(text).toContain('PERMIT_TOKENS[0].rights[1]');
      expect(text).not.toContain('k7Q-ba');
    } finally {
      await bad.stop();
    }
  }, 120_000);
});

