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

/** One permit request of the local-fallback run, with the node (server) that answered it. */
interface LocalSample {
  node: number;
  at: number;
  latencyMs: number;
  status: number;
  allowed?: boolean;
  reason?: string;
  reasonHeader?: string | null;
  error?: string;
}

/** The most of `samples` allowed in any window of length `spanMs` (by send time) and that window's bound. */
function worstWindow(samples: LocalSample[], bound: (spanMs: number) => number): { admitted: number; bound: number; excess: number } {
  const allowed = samples.filter((s) => s.allowed).sort((a, b) => a.at - b.at);
  let worst = { admitted: 0, bound: 0, excess: -Infinity };
  // Every window that starts and ends on an admitted request (the tightest ones).
  for (let i = 0; i < allowed.length; i++) {
    for (let j = i; j < allowed.length; j++) {
      // A request sent at `at` was decided by `at + latency`: the window on the server's clock is at most this long.
      const span = allowed[j]!.at + allowed[j]!.latencyMs - allowed[i]!.at;
      const b = bound(span);
      const admitted = j - i + 1;
      if (admitted - b > worst.excess) worst = { admitted, bound: b, excess: admitted - b };
    }
  }
  return worst;
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

  it("onStoreError 'local', two nodes on one Redis: kill, restart, pause; each node keeps to its local limit, then the store decides again", { timeout: 90_000 }, async () => {
    const LOCAL = { capacity: 5, refillPerSecond: 2 };
    const COOLDOWN_MS = 500;
    const policies = JSON.stringify({
      insured: { capacity: 20, refillPerSecond: 10, onStoreError: 'local', local: LOCAL, timeoutMs: TIMEOUT_MS },
      exact: { capacity: 5, refillPerSecond: 1, timeoutMs: TIMEOUT_MS },
    });
    let redis: RedisProcess = await startRedis();
    const port = redis.port;
    const env = { REDIS_URL: redis.url, LIMITER_POLICIES: policies, PERMIT_TOKENS: TOKEN, LIMITER_CIRCUIT_BREAKER: `5/${COOLDOWN_MS}` };
    const servers = [await startNodeServer(env), await startNodeServer(env)];
    const t0 = performance.now();
    const now = () => performance.now() - t0;
    const samples: LocalSample[] = [];
    let stopped = false;
    // 3 loops per node, all on one key, paced so that demand (about 60/s per node) exceeds every limit.
    const loops = servers.flatMap((server, node) =>
      Array.from({ length: 3 }, async () => {
        while (!stopped) {
          const at = now();
          try {
            const res = await fetch(`${server.url}/v1/permits`, {
              method: 'POST',
              headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
              body: JSON.stringify({ policy: 'insured', key: 'shared' }),
              signal: AbortSignal.timeout(10_000),
            });
            const body = (await res.json()) as { allowed?: boolean; reason?: string };
            samples.push({ node, at, latencyMs: now() - at, status: res.status, allowed: body.allowed, reason: body.reason, reasonHeader: res.headers.get('x-ratelimit-reason') });
          } catch (err) {
            samples.push({ node, at, latencyMs: now() - at, status: 0, error: (err as Error).message });
          }
          await sleep(50);
        }
      }),
    );
    const outages: Window[] = [];
    const recovery: number[] = [];
    try {
      await sleep(1000);
      let from = now();
      redis.process.kill('SIGKILL');
      await sleep(2500);
      redis = await startRedis({ port });
      const restartedAt = now();
      outages.push({ from, to: restartedAt });
      await sleep(1500);
      from = now();
      redis.process.kill('SIGSTOP');
      await sleep(2500);
      redis.process.kill('SIGCONT');
      const resumedAt = now();
      outages.push({ from, to: resumedAt });
      await sleep(1500);
      stopped = true;
      await Promise.all(loops);
      for (const back of [restartedAt, resumedAt]) {
        const first = samples.filter((s) => s.at >= back && s.status === 200 && s.reason === undefined).sort((a, b) => a.at - b.at)[0];
        recovery.push(first ? first.at + first.latencyMs - back : Infinity);
      }

      const local = samples.filter((s) => s.reason === 'local');
      const perOutage = outages.map((w) =>
        servers.map((_, node) => {
          const mine = local.filter((s) => s.node === node && s.at >= w.from - TIMEOUT_MS && s.at <= w.to + COOLDOWN_MS + MARGIN_MS);
          const spanMs = mine.length ? Math.max(...mine.map((s) => s.at + s.latencyMs)) - Math.min(...mine.map((s) => s.at)) : 0;
          const admitted = mine.filter((s) => s.allowed).length;
          // The local bucket starts full and refills at its rate: its ideal count over that span.
          return { node, decisions: mine.length, admitted, spanMs: Math.round(spanMs), worst: worstWindow(mine, (ms) => LOCAL.capacity + (LOCAL.refillPerSecond * ms) / 1000) };
        }),
      );
      console.log(`[faults] ${JSON.stringify({ label: 'local-fallback', sent: samples.length, statuses: Object.fromEntries(Object.entries(Object.groupBy(samples, (s) => `${s.status}:${s.reason ?? 'store'}`)).map(([k, v]) => [k, v!.length])), perOutage, recoveryMs: recovery.map(Math.round) })}`);

      for (const s of samples) {
        expect(s.error, `request at ${s.at.toFixed(0)} ms failed`).toBeUndefined();
        // Allowed (200) or refused by a bucket (429), local or the store's: never a 503, the fail mode decides locally.
        expect([200, 429]).toContain(s.status);
        expect(s.reasonHeader ?? undefined).toBe(s.reason);
        if (s.reason !== undefined) {
          expect(s.reason).toBe('local');
          const during = outages.some((w) => s.at >= w.from - TIMEOUT_MS && s.at <= w.to + COOLDOWN_MS + MARGIN_MS);
          expect(during, `a local decision at ${s.at.toFixed(0)} ms, outside any outage`).toBe(true);
        }
        expect(s.latencyMs, `latency at ${s.at.toFixed(0)} ms`).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS);
      }
      for (const nodes of perOutage) {
        for (const n of nodes) {
          expect(n.decisions, `node ${n.node} decided locally during the outage`).toBeGreaterThan(20);
          // Each node keeps to the local limit in every window of the outage, not only in total...
          expect(n.worst.excess, `node ${n.node}: ${n.worst.admitted} admitted against a bound of ${n.worst.bound.toFixed(2)}`).toBeLessThanOrEqual(0);
          // ...and admits at least what its local bucket refills over the span, less one store timeout
          // before the first local answer (the bucket may start part-empty: local buckets are kept until
          // the store has answered for a whole local refill window, longer than the 1.5 s between outages).
          expect(n.admitted).toBeGreaterThanOrEqual(Math.floor((LOCAL.refillPerSecond * (n.spanMs - TIMEOUT_MS - MARGIN_MS)) / 1000));
        }
      }
      // Store decisions again within one breaker cool-down (plus one HTTP round on a loaded machine).
      for (const r of recovery) expect(r).toBeLessThan(COOLDOWN_MS + MARGIN_MS);
      // The store's decisions on the shared key, both nodes together, keep to the policy in every window.
      const stored = samples.filter((s) => s.reason === undefined && s.status !== 0);
      const worstStore = worstWindow(stored, (ms) => 20 + (10 * ms) / 1000);
      expect(worstStore.excess, `${worstStore.admitted} admitted by the store against ${worstStore.bound.toFixed(2)}`).toBeLessThanOrEqual(0);
      await exactAgain(servers[0]!);
    } finally {
      stopped = true;
      await Promise.all(loops);
      for (const server of servers) {
        expect(await server.stop()).toBe(0);
        expect(server.output()).not.toContain(TOKEN);
      }
      await redis.stop();
    }
  });
});
