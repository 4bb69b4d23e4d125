// GET /v1/stats on the Worker inside workerd (wrangler dev, as `npm run dev` runs it), memory store:
// the same contract as the Node server and the in-process app.
import { afterAll, beforeAll, describe, it } from 'vitest';
import { startDevWorker, type DevWorker } from '../support/worker.js';
import { checkStatsContract, STATS_POLICIES } from '../support/stats-contract.js';

let dev: DevWorker;

beforeAll(async () => {
  dev = await startDevWorker({ LIMITER_STORE: 'memory', LIMITER_POLICIES: STATS_POLICIES, PERMIT_TOKENS: 'worker-stats-token' });
}, 120_000);

afterAll(async () => {
  await dev?.stop();
});

describe('Worker in workerd: GET /v1/stats', () => {
  it('401 without a valid token; exact counts and the refused keys after known traffic', async () => {
    await checkStatsContract((path, init) => fetch(dev.url + path, init), 'worker-stats-token');
  });
});
