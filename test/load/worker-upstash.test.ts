// The Worker inside workerd with LIMITER_STORE=upstash, pointed at the local Upstash REST server over the
// real Redis; a Worker and a Node server (TCP Redis) sharing that Redis obey one combined limit; and
// `npm run dev -- --upstash` brings the whole stack up.
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { PermitClient } from '../../src/client/permit-client.js';
import { startUpstashLocal, type UpstashLocal } from '../../scripts/upstash-local/server.js';
import { startDevWorker, type DevWorker } from '../support/worker.js';
import { startNodeServer, type NodeServer } from '../support/node-server.js';
import { combinedRun } from '../support/combined.js';

const TOKEN = 'shared-token';
const POLICIES = JSON.stringify({ shared: { capacity: 10, refillPerSecond: 20 }, api: { capacity: 2, refillPerSecond: 1 } });

let upstash: UpstashLocal;
let worker: DevWorker;
let node: NodeServer;

beforeAll(async () => {
  upstash = await startUpstashLocal({ redisUrl: inject('redisUrl'), token: 'upstash-token' });
  [worker, node] = await Promise.all([
    // The policy-wide record is read once a minute at most (the longest policyRefreshMs), so that counting
    // the REST requests of three decisions cannot catch a background reading (at half policyRefreshMs,
    // 30 s after the warm-up's) on a slow machine.
    startDevWorker({ LIMITER_STORE: 'upstash', UPSTASH_REDIS_REST_URL: upstash.url, UPSTASH_REDIS_REST_TOKEN: 'upstash-token', LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: TOKEN, LIMITER_POLICY_REFRESH_MS: '60000' }),
    startNodeServer({ REDIS_URL: inject('redisUrl'), LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: TOKEN }),
  ]);
}, 120_000);
afterAll(async () => {
  await Promise.all([worker?.stop(), node?.stop()]);
  await upstash?.close();
});

describe('Worker on Upstash (local REST server over real Redis)', () => {
  it('serves the permit endpoint end to end, with the store in Redis', async () => {
    const client = new PermitClient({ url: worker.url, token: TOKEN });
    const key = `wu-${Date.now()}`;
    // The first decision on a fresh Redis loads the script (EVALSHA -> NOSCRIPT -> EVAL): two requests.
    await client.take('api', `${key}-warm`);
    const before = upstash.stats.requests;
    expect(await client.take('api', key)).toMatchObject({ allowed: true, remaining: 1 });
    expect(await client.take('api', key)).toMatchObject({ allowed: true, remaining: 0 });
    const denied = await client.take('api', key);
    expect(denied.allowed).toBe(false);
    // Steady state: one HTTP request per decision.
    expect(upstash.stats.requests - before).toBe(3);
    // The Node server on TCP Redis sees the same bucket.
    expect(await new PermitClient({ url: node.url, token: TOKEN }).peek('api', key)).toMatchObject({ remaining: 0 });
    expect(await (await fetch(`${worker.url}/healthz`)).json()).toEqual({ ok: true, store: 'redis', pendingStoreCalls: 0, maxPendingStoreCalls: 1024, circuit: 'closed', leases: { keys: 0, tokens: 0 }, localKeys: 0 });
  });

  it('a Worker and a Node server sharing one Redis obey one combined limit', async () => {
    const clients = [new PermitClient({ url: worker.url, token: TOKEN }), new PermitClient({ url: node.url, token: TOKEN })];
    const { admitted, perClient: perServer, idealMin, idealMax } = await combinedRun(clients, {
      policy: 'shared',
      key: `combined-${Date.now()}`,
      callers: 24,
      durationMs: 2000,
      capacity: 10,
      refillPerSecond: 20,
    });
    console.log(`[worker+node on one redis] admitted=${admitted} (worker ${perServer[0]}, node ${perServer[1]}) ideal∈[${idealMin.toFixed(2)}, ${idealMax.toFixed(2)}]`);
    expect(perServer[0]).toBeGreaterThan(0);
    expect(perServer[1]).toBeGreaterThan(0);
    expect(admitted).toBeLessThanOrEqual(Math.floor(idealMax));
    expect(admitted).toBeGreaterThanOrEqual(Math.floor(idealMin - 1 - idealMin * 0.005));
  });
});

describe('npm run dev -- --upstash', () => {
  it('brings up redis-server, the local REST server and the Worker, and its curl line answers 200', async () => {
    const dev = await startDevWorker({}, ['--upstash']);
    try {
      expect(dev.output()).toMatch(/up on Redis redis:\/\/127\.0\.0\.1:\d+ through the local Upstash REST server/);
      const { stdout } = await promisify(execFile)('sh', ['-c', dev.curlLine()]);
      expect(stdout).toMatch(/^HTTP\/1\.1 200 OK/);
      expect(await (await fetch(`${dev.url}/healthz`)).json()).toEqual({ ok: true, store: 'redis', pendingStoreCalls: 0, maxPendingStoreCalls: 1024, circuit: 'closed', leases: { keys: 0, tokens: 0 }, localKeys: 0 });
    } finally {
      await dev.stop();
    }
  });
});
