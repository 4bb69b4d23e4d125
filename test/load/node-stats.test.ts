// GET /v1/stats on the real Node server (`npm start`), and the same snapshot without a token at
// /stats.json on METRICS_PORT; a bad LIMITER_TOP_KEYS stops the start naming it.
import { describe, expect, it } from 'vitest';
import { freePort } from '../../scripts/lib/redis-server.js';
import { startNodeServer } from '../support/node-server.js';
import { checkStatsContract, STATS_POLICIES } from '../support/stats-contract.js';

describe('Node server: who is being limited', () => {
  it('GET /v1/stats keeps the contract, and METRICS_PORT serves the same snapshot at /stats.json', async () => {
    const metricsPort = await freePort();
    const server = await startNodeServer({ LIMITER_STORE: 'memory', LIMITER_POLICIES: STATS_POLICIES, PERMIT_TOKENS: 'node-token', METRICS_PORT: String(metricsPort) });
    try {
      const body = await checkStatsContract((path, init) => fetch(server.url + path, init), 'node-token');
      const res = await fetch(`http://127.0.0.1:${metricsPort}/stats.json`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('application/json');
      expect(await res.json()).toEqual(body);
      // Not on the public port.
      expect((await fetch(`${server.url}/stats.json`)).status).toBe(404);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });

  it('a bad LIMITER_TOP_KEYS stops the start with a message naming it', async () => {
    await expect(startNodeServer({ LIMITER_STORE: 'memory', LIMITER_TOP_KEYS: '-5' })).rejects.toThrow(/LIMITER_TOP_KEYS must be an integer from 0 to 10000/);
  });
});
