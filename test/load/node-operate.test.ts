// Operating `npm start`: it prints a curl line that works, and with METRICS_PORT it serves Prometheus
// metrics on that port (not the public one) whose counts match the traffic exactly.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it, inject } from 'vitest';
import { freePort } from '../../scripts/lib/redis-server.js';
import { startNodeServer } from '../support/node-server.js';
import { sample } from '../support/prometheus.js';

describe('npm start for operators', () => {
  it('prints a curl line that answers 200, and exposes exact metrics on METRICS_PORT only', async () => {
    const metricsPort = await freePort();
    const server = await startNodeServer({
      REDIS_URL: inject('redisUrl'),
      PERMIT_TOKENS: 'ops-token',
      METRICS_PORT: String(metricsPort),
      LIMITER_POLICIES: JSON.stringify({ metered: { capacity: 3, refillPerSecond: 0.001 } }),
    });
    try {
      const line = /^(curl -i .*)$/m.exec(server.output())?.[1];
      expect(line).toContain(`http://127.0.0.1:${server.port}/v1/permits`);
      // The token is named through the shell, never printed.
      expect(server.output()).not.toContain('ops-token');
      const key = `ops-${Date.now()}`;
      // The printed line, pasted into another shell (the server's PERMIT_TOKENS was set inline, so that
      // shell does not have it) with TOKEN set as the line says (and this run's key), answers 200.
      const { PERMIT_TOKENS: _unset, ...shellEnv } = process.env;
      const { stdout } = await promisify(execFile)('sh', ['-c', line!.replace('user-1', key)], { env: { ...shellEnv, TOKEN: 'ops-token' } });
      expect(stdout).toMatch(/^HTTP\/1\.1 200 OK/);
      // Without TOKEN the shell stops with a line saying what to set, and sends nothing (no silent 401).
      const unset = await promisify(execFile)('sh', ['-c', line!], { env: shellEnv }).then(
        () => ({ code: 0, stdout: '', stderr: '' }),
        (err: { code: number; stdout: string; stderr: string }) => err,
      );
      expect(unset.code).not.toBe(0);
      expect(unset.stdout).toBe('');
      expect(unset.stderr).toMatch(/TOKEN.*PERMIT_TOKENS/);
      const post = () =>
        fetch(`${server.url}/v1/permits`, {
          method: 'POST',
          headers: { Authorization: 'Bearer ops-token', 'Content-Type': 'application/json' },
          body: JSON.stringify({ policy: 'metered', key }),
        }).then((r) => r.status);
      const statuses = [await post(), await post(), await post(), await post()];
      expect(statuses).toEqual([200, 200, 429, 429]);
      expect((await fetch(`${server.url}/metrics`)).status).toBe(404);
      const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      const text = await res.text();
      expect(sample(text, 'edge_limiter_decisions_total{policy="metered",op="take",outcome="allowed"}')).toBe(3);
      expect(sample(text, 'edge_limiter_decisions_total{policy="metered",op="take",outcome="denied"}')).toBe(2);
      expect(sample(text, 'edge_limiter_store_duration_seconds_count{store="redis"}')).toBe(5);
      expect(text).toContain('process_cpu_seconds_total');
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('a bad METRICS_PORT stops the start with a message naming it', async () => {
    await expect(startNodeServer({ METRICS_PORT: 'ninety' })).rejects.toThrow(/METRICS_PORT must be a port number/);
  });
});
