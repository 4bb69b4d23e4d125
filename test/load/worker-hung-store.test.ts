// Inside workerd: a Worker on the Upstash path whose REST endpoint stops answering (requests hang and
// never settle). 2,000 decisions time out and fail closed; when the endpoint answers again the very next
// decision is made by the store, and /healthz shows no call left in flight.
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { startUpstashLocal, type UpstashLocal } from '../../scripts/upstash-local/server.js';
import { startDevWorker, type DevWorker } from '../support/worker.js';

const TOKEN = 'hang-token';
const POLICIES = JSON.stringify({ api: { capacity: 5, refillPerSecond: 1, timeoutMs: 50 } });

let upstash: UpstashLocal;
let gate: Server;
let worker: DevWorker;
let mode: 'pass' | 'hang' = 'pass';
const held = new Set<IncomingMessage>();
let hungRequests = 0;

beforeAll(async () => {
  upstash = await startUpstashLocal({ redisUrl: inject('redisUrl'), token: 'upstash-token' });
  const target = new URL(upstash.url);
  // In front of the REST server: passes requests through, or holds them forever without an answer.
  gate = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (mode === 'hang') {
      hungRequests++;
      held.add(req);
      req.resume();
      req.on('close', () => held.delete(req));
      return;
    }
    const out = request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode!, up.headers);
      up.pipe(res);
    });
    out.on('error', () => res.destroy());
    req.pipe(out);
  });
  await new Promise<void>((r) => gate.listen(0, '127.0.0.1', () => r()));
  const gateUrl = `http://127.0.0.1:${(gate.address() as { port: number }).port}`;
  worker = await startDevWorker({
    LIMITER_STORE: 'upstash',
    UPSTASH_REDIS_REST_URL: gateUrl,
    UPSTASH_REDIS_REST_TOKEN: 'upstash-token',
    LIMITER_POLICIES: POLICIES,
    PERMIT_TOKENS: TOKEN,
    // No breaker: every one of the 2,000 decisions reaches the hung store.
    LIMITER_CIRCUIT_BREAKER: 'off',
  });
}, 120_000);
afterAll(async () => {
  await worker?.stop();
  for (const r of held) r.socket.destroy();
  await new Promise<void>((r) => (gate ? gate.close(() => r()) : r()));
  await upstash?.close();
});

const permit = (key: string) =>
  fetch(`${worker.url}/v1/permits`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ policy: 'api', key }),
  });

describe('Worker (workerd) with a store whose calls never settle', () => {
  it('2,000 timed-out decisions later, the next one is decided by the store and nothing is left in flight', async () => {
    // Warm: the script is loaded while the store answers.
    expect((await permit('warm')).status).toBe(200);
    mode = 'hang';
    const statuses: Record<number, number> = {};
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: 50 }, async () => {
        while (next < 2000) {
          const i = next++;
          const res = await permit(`k${i % 100}`);
          statuses[res.status] = (statuses[res.status] ?? 0) + 1;
          await res.arrayBuffer();
        }
      }),
    );
    console.log(`[worker hung store] 2000 decisions in ${Math.round(performance.now() - t0)} ms: ${JSON.stringify(statuses)}; REST requests held: ${hungRequests}`);
    // Fail closed, within the policy's 50 ms timeout each.
    expect(statuses).toEqual({ 503: 2000 });
    expect(hungRequests).toBeGreaterThan(0);
    mode = 'pass';
    const res = await permit('after');
    expect(res.status).toBe(200);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ allowed: true, remaining: 4 });
    expect(body.reason).toBeUndefined();
    const health = await (await fetch(`${worker.url}/healthz`)).json();
    expect(health).toEqual({ ok: true, store: 'redis', pendingStoreCalls: 0, maxPendingStoreCalls: 1024, circuit: 'closed', leases: { keys: 0, tokens: 0 }, localKeys: 0 });
  });
});
