// Store faults with real processes and real signals, while load runs against the Node server:
// SIGKILL redis-server, restart it on the same port, SIGSTOP/SIGCONT it; the same for the Upstash path
// (stop the local REST server, then Redis behind it). Every request must be answered, within the
// policy's timeout plus a margin, per its onStoreError; decisions are exact again within a second.
import { describe, expect, it } from 'vitest';
import { startRedis, freePort, type RedisProcess } from '../../scripts/lib/redis-server.js';
import { startUpstashLocal, type UpstashLocal } from '../../scripts/upstash-local/server.js';
import { startNodeServer, type NodeServer } from '../support/node-server.js';
import { fdCount, sleep, startLoad, type Sample } from '../support/load.js';

const TOKEN = 'fault-test-secret-7f3a9c';
const TIMEOUT_MS = 200;
/** What "within the timeout" allows on top of timeoutMs: HTTP on a loaded 2-core machine. */
const MARGIN_MS = 300;
const POLICIES = JSON.stringify({
  closed: { capacity: 1_000_000, refillPerSecond: 1_000_000, onStoreError: 'deny', timeoutMs: TIMEOUT_MS },
  open: { capacity: 1_000_000, refillPerSecond: 1_000_000, onStoreError: 'allow', timeoutMs: TIMEOUT_MS },
  exact: { capacity: 5, refillPerSecond: 1, timeoutMs: TIMEOUT_MS },
});

interface Window {
  from: number;
  to: number;
}

function summarize(label: string, samples: Sample[], sent: number, outages: Window[], recoveryMs: number[]) {
  const inOutage = samples.filter((s) => outages.some((w) => s.at >= w.from && s.at <= w.to));
  const maxOutageLatency = Math.max(0, ...inOutage.map((s) => s.latencyMs));
  const line = {
    label,
    sent,
    answered: samples.filter((s) => s.status !== 0).length,
    errors: samples.filter((s) => s.status === 0).length,
    statuses: Object.fromEntries(Object.entries(Object.groupBy(samples, (s) => String(s.status))).map(([k, v]) => [k, v!.length])),
    duringOutage: inOutage.length,
    maxLatencyDuringOutageMs: Math.round(maxOutageLatency),
    maxLatencyOverallMs: Math.round(Math.max(...samples.map((s) => s.latencyMs))),
    recoveryMs: recoveryMs.map(Math.round),
  };
  console.log(`[faults] ${JSON.stringify(line)}`);
  return line;
}

/** ms from `from` until the first request sent after it was decided by the store again (no reason). */
function recoveredAfter(samples: Sample[], from: number): number {
  const first = samples.filter((s) => s.at >= from && s.status === 200 && s.reason === undefined).sort((a, b) => a.at - b.at)[0];
  return first ? first.at + first.latencyMs - from : Infinity;
}

function checkAnswers(samples: Sample[], outages: Window[]) {
  for (const s of samples) {
    expect(s.error, `request at ${s.at.toFixed(0)} ms failed`).toBeUndefined();
    expect([200, 503]).toContain(s.status);
    if (s.status === 503) {
      expect(s.policy).toBe('closed');
      expect(s.reason).toBeUndefined();
      expect(s.retryAfter).toBe('1');
    }
    if (s.policy === 'open') expect(s.status).toBe(200);
    if (s.reason !== undefined) {
      expect(s.reason).toBe('store_error');
      expect(s.reasonHeader).toBe('store_error');
    }
    const during = outages.some((w) => s.at >= w.from - TIMEOUT_MS && s.at <= w.to + 1000);
    if (!during) expect(s.status, `status ${s.status} at ${s.at.toFixed(0)} ms outside any outage`).toBe(200);
    // Every answer, in an outage or not, comes within the store timeout plus the margin.
    expect(s.latencyMs, `latency at ${s.at.toFixed(0)} ms`).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS);
  }
}

async function exactAgain(server: NodeServer) {
  const key = `exact-${Date.now()}`;
  let allowed = 0;
  for (let i = 0; i < 8; i++) {
    const res = await fetch(`${server.url}/v1/permits`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ policy: 'exact', key }),
    });
    const b = (await res.json()) as { allowed: boolean; reason?: string };
    expect(b.reason).toBeUndefined();
    if (b.allowed) allowed++;
  }
  expect(allowed).toBe(5);
}

describe('store faults under load', () => {
  it('Redis over TCP: kill, restart, pause', { timeout: 90_000 }, async () => {
    let redis: RedisProcess = await startRedis();
    const port = redis.port;
    const server = await startNodeServer({ REDIS_URL: redis.url, LIMITER_POLICIES: POLICIES, PERMIT_TOKENS: TOKEN });
    const load = startLoad({ url: server.url, token: TOKEN, policies: ['closed', 'open'], concurrency: 8 });
    const outages: Window[] = [];
    const recovery: number[] = [];
    try {
      await sleep(1000);
      const fdsBefore = await fdCount(server.process.pid!);
      // 1. kill -9: the socket closes; decisions fail at once per fail mode.
      let from = load.now();
      redis.process.kill('SIGKILL');
      await sleep(1500);
      // 2. restart on the same port, empty (no persistence): the script cache is gone too (NOSCRIPT).
      redis = await startRedis({ port });
      const restartedAt = load.now();
      outages.push({ from, to: restartedAt });
      await sleep(1500);
      recovery.push(recoveredAfter(load.samples, restartedAt));
      // 3. SIGSTOP: the socket stays open and nothing answers; timeouts must fire.
      from = load.now();
      redis.process.kill('SIGSTOP');
      await sleep(700);
      const health = (await (await fetch(`${server.url}/healthz`)).json()) as { ok: boolean; pendingStoreCalls: number; circuit: string };
      await sleep(800);
      const fdsPaused = await fdCount(server.process.pid!);
      redis.process.kill('SIGCONT');
      const resumedAt = load.now();
      outages.push({ from, to: resumedAt });
      await sleep(1500);
      recovery.push(recoveredAfter(load.samples, resumedAt));
      await load.stop();

      const line = summarize('redis-tcp', load.samples, load.sent(), outages, recovery);
      expect(line.answered).toBe(load.sent());
      expect(line.errors).toBe(0);
      checkAnswers(load.samples, outages);
      expect(line.duringOutage).toBeGreaterThan(100);
      for (const r of recovery) expect(r).toBeLessThan(1000);
      // While paused: nothing piled up without bound.
      expect(health.ok).toBe(false);
      expect(health.pendingStoreCalls).toBeLessThanOrEqual(64);
      expect(fdsPaused).toBeLessThanOrEqual(fdsBefore + 16);
      await exactAgain(server);
      expect(server.process.exitCode).toBeNull();
    } finally {
      await load.stop();
      const code = await server.stop();
      expect(code).toBe(0);
      expect(server.output()).not.toContain(TOKEN);
      await redis.stop();
    }
  });

  it('Upstash path: stop the REST server, then Redis behind it', { timeout: 90_000 }, async () => {
    let redis: RedisProcess = await startRedis();
    const redisPort = redis.port;
    const restPort = await freePort();
    let rest: UpstashLocal = await startUpstashLocal({ redisUrl: redis.url, token: 'rest-token', port: restPort });
    const server = await startNodeServer({
      LIMITER_STORE: 'upstash',
      UPSTASH_REDIS_REST_URL: rest.url,
      UPSTASH_REDIS_REST_TOKEN: 'rest-token',
      LIMITER_POLICIES: POLICIES,
      PERMIT_TOKENS: TOKEN,
    });
    const load = startLoad({ url: server.url, token: TOKEN, policies: ['closed', 'open'], concurrency: 8 });
    const outages: Window[] = [];
    const recovery: number[] = [];
    try {
      await sleep(1000);
      // 1. The REST server goes away: connections are refused.
      let from = load.now();
      await rest.close();
      await sleep(1500);
      rest = await startUpstashLocal({ redisUrl: redis.url, token: 'rest-token', port: restPort });
      let back = load.now();
      outages.push({ from, to: back });
      await sleep(1500);
      recovery.push(recoveredAfter(load.samples, back));
      // 2. Redis behind it dies: the REST server answers 500.
      from = load.now();
      redis.process.kill('SIGKILL');
      await sleep(1500);
      redis = await startRedis({ port: redisPort });
      back = load.now();
      outages.push({ from, to: back });
      await sleep(1500);
      recovery.push(recoveredAfter(load.samples, back));
      await load.stop();

      const line = summarize('upstash-rest', load.samples, load.sent(), outages, recovery);
      expect(line.answered).toBe(load.sent());
      expect(line.errors).toBe(0);
      checkAnswers(load.samples, outages);
      expect(line.duringOutage).toBeGreaterThan(100);
      for (const r of recovery) expect(r).toBeLessThan(1000);
      await exactAgain(server);
    } finally {
      await load.stop();
      expect(await server.stop()).toBe(0);
      expect(server.output()).not.toContain(TOKEN);
      await rest.close();
      await redis.stop();
    }
  });
});
