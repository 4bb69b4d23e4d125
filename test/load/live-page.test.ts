// The live page in a real headless browser (Debian's chromium through playwright-core): `npm start`
// with METRICS_PORT, known traffic through POST /v1/permits, then the page on the metrics port must
// show, as it updates by itself, exactly the counts the traffic made, the same as /metrics and
// /stats.json say: totals per policy and outcome, the 15-minute sums of the charted series, the most
// refused keys (a key holding markup is shown as text), store calls timed, circuit, pending calls,
// leased tokens. No console error, no request to another origin, nothing to click. A screenshot goes to
// LIVE_PAGE_SCREENSHOT (docs/live-page.png regenerates the one in docs/operating.md), else to the temp directory.
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../scripts/lib/redis-server.js';
import { launchChromium, type Browser } from '../support/chromium.js';
import { startNodeServer, type NodeServer } from '../support/node-server.js';
import { sample } from '../support/prometheus.js';
import { LIVE_CSP } from '../../functions/app/live.js';

const TOKEN = 'live-token';
const POLICIES = {
  api: { capacity: 4, refillPerSecond: 2 },
  hot: { capacity: 40, refillPerSecond: 0.001, lease: { tokens: 4, maxAgeMs: 120_000 } },
};
const OUTCOMES = ['allowed', 'denied', 'store_error', 'deny_cache', 'lease', 'local'] as const;
const MARKUP_KEY = '<img src=x onerror=alert(1)>';

let server: NodeServer;
let browser: Browser;
let metricsUrl: string;

beforeAll(async () => {
  const metricsPort = await freePort();
  metricsUrl = `http://127.0.0.1:${metricsPort}`;
  [server, browser] = await Promise.all([
    startNodeServer({ LIMITER_STORE: 'memory', PERMIT_TOKENS: TOKEN, METRICS_PORT: String(metricsPort), LIMITER_POLICIES: JSON.stringify(POLICIES) }),
    launchChromium({ width: 1280, height: 900 }),
  ]);
}, 600_000);

afterAll(async () => {
  await browser?.close();
  if (server) expect(await server.stop()).toBe(0);
});

/** What the traffic did, counted from the responses: per policy and outcome, and refusals per key. */
const counted = { decisions: {} as Record<string, Record<string, number>>, refusedByKey: {} as Record<string, Record<string, number>> };
for (const p of Object.keys(POLICIES)) {
  counted.decisions[p] = Object.fromEntries(OUTCOMES.map((o) => [o, 0]));
  counted.refusedByKey[p] = {};
}

async function permit(policy: string, key: string): Promise<void> {
  const res = await fetch(`${server.url}/v1/permits`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ policy, key }),
  });
  const body = (await res.json()) as { allowed: boolean; reason?: string };
  expect([200, 429]).toContain(res.status);
  const outcome = body.reason ?? (body.allowed ? 'allowed' : 'denied');
  counted.decisions[policy]![outcome]!++;
  if (!body.allowed) counted.refusedByKey[policy]![key] = (counted.refusedByKey[policy]![key] ?? 0) + 1;
}

/** `seconds` of traffic in 100 ms ticks, heavier in the middle, so the charts have a shape. */
async function traffic(seconds: number, phase: number): Promise<void> {
  const ticks = seconds * 10;
  for (let t = 0; t < ticks; t++) {
    const burst = 1 + Math.round(3 * Math.sin((Math.PI * t) / ticks));
    const calls: Promise<void>[] = [];
    for (let b = 0; b < burst; b++) {
      calls.push(permit('api', 'scraper-7f3a'));
      calls.push(permit('api', `user-${(t + b) % 6}`));
      if (t % 3 === 0) calls.push(permit('api', phase === 1 ? MARKUP_KEY : '203.0.113.9'));
      if (t % 2 === 0) calls.push(permit('api', '2001:db8:5:6::/64'));
      calls.push(permit('hot', 'tenant-42'));
    }
    await Promise.all(calls);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const text = (page: import('playwright-core').Page, testid: string) => page.locator(`[data-testid="${testid}"]`).first().textContent();

describe('live page', () => {
  it('shows exactly the traffic, updating by itself, the same as /metrics and /stats.json', { timeout: 180_000 }, async () => {
    await traffic(4, 1);

    const page = await browser.context.newPage();
    const problems: string[] = [];
    const requests: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    page.on('dialog', (d) => {
      problems.push(`dialog: ${d.message()}`);
      void d.dismiss();
    });
    page.on('request', (r) => requests.push(r.url()));
    await page.goto(`${metricsUrl}/`);
    await page.waitForFunction(() => Number(document.body.dataset.polls ?? 0) >= 1, null, { timeout: 15_000 });
    const pollsBefore = Number(await page.evaluate(() => document.body.dataset.polls));

    // More traffic while the page is open: it must catch up without a reload.
    await traffic(5, 2);
    const want = counted.decisions;
    await page.waitForFunction(
      (expected) => Object.entries(expected).every(([p, byOutcome]) => Object.entries(byOutcome).every(([o, n]) => document.querySelector(`[data-testid="window-${p}-${o}"]`)?.textContent === String(n))),
      want,
      { timeout: 20_000 },
    );
    // One more poll, so every number below comes from one answer after the traffic.
    const settled = Number(await page.evaluate(() => document.body.dataset.polls));
    await page.waitForFunction((n) => Number(document.body.dataset.polls) > n, settled, { timeout: 10_000 });
    expect(settled).toBeGreaterThan(pollsBefore);

    // Every answer on the metrics port carries the page's CSP and nosniff, not only the page's own.
    for (const path of ['/metrics', '/stats.json', '/no-such-path']) {
      const res = await fetch(`${metricsUrl}${path}`);
      await res.arrayBuffer();
      expect(res.headers.get('content-security-policy'), path).toBe(LIVE_CSP);
      expect(res.headers.get('x-content-type-options'), path).toBe('nosniff');
    }
    const metrics = await (await fetch(`${metricsUrl}/metrics`)).text();
    const stats = (await (await fetch(`${metricsUrl}/stats.json`)).json()) as {
      policies: Record<string, { decisions: Record<string, number>; refused: number; topRefused: { key: string; count: number; error: number }[] }>;
    };
    const health = (await (await fetch(`${server.url}/healthz`)).json()) as { pendingStoreCalls: number; circuit: string; leases: { tokens: number; keys: number } };

    let total = 0;
    for (const [policy, byOutcome] of Object.entries(want)) {
      for (const o of OUTCOMES) {
        const n = byOutcome[o]!;
        total += n;
        expect(sample(metrics, `edge_limiter_decisions_total{policy="${policy}",op="take",outcome="${o}"}`) ?? 0, `${policy} ${o} /metrics`).toBe(n);
        expect(stats.policies[policy]!.decisions[o], `${policy} ${o} stats.json`).toBe(n);
        expect(await text(page, `total-${policy}-${o}`), `${policy} ${o} total`).toBe(String(n));
        expect(await text(page, `window-${policy}-${o}`), `${policy} ${o} window`).toBe(String(n));
      }
      const refusals = Object.values(counted.refusedByKey[policy]!).reduce((a, b) => a + b, 0);
      expect(await text(page, `refused-${policy}`)).toBe(String(refusals));
      expect(stats.policies[policy]!.refused).toBe(refusals);
    }
    expect(total).toBeGreaterThan(500);
    expect(want.api!.allowed).toBeGreaterThan(0);
    expect(want.api!.denied).toBeGreaterThan(0);
    expect(want.hot!.lease).toBeGreaterThan(0);

    // The most refused keys: as many as fewer than K keys were refused, each exact (error 0), in the server's order.
    for (const policy of Object.keys(POLICIES)) {
      const rows = await page.locator(`[data-testid="top-${policy}"] [data-testid="refused-row"]`).evaluateAll((trs) =>
        trs.map((tr) => ({
          key: tr.querySelector('[data-testid="refused-key"]')!.textContent,
          count: Number(tr.querySelector('[data-testid="refused-count"]')!.textContent),
          error: Number(tr.querySelector('[data-testid="refused-error"]')!.textContent),
        })),
      );
      const expected = Object.entries(counted.refusedByKey[policy]!).map(([key, count]) => ({ key, count, error: 0 }));
      expect(rows.length).toBe(expected.length);
      expect([...rows].sort((a, b) => a.key!.localeCompare(b.key!))).toEqual(expected.sort((a, b) => a.key.localeCompare(b.key)));
      expect(rows).toEqual(stats.policies[policy]!.topRefused.map(({ key, count, error }) => ({ key, count, error })));
    }
    // The key holding markup is text, not an element.
    expect(await page.locator('[data-testid="refused-key"]', { hasText: MARKUP_KEY }).count()).toBe(1);
    expect(await page.locator('#refused img').count()).toBe(0);

    // Store calls timed: every decision that called the store (not the lease answers).
    const timed = sample(metrics, 'edge_limiter_store_duration_seconds_count{store="memory"}');
    expect(await text(page, 'store-calls')).toBe(String(timed));
    expect(await text(page, 'p50')).toMatch(/^\d[\d.]* (µs|ms)$/);
    expect(await text(page, 'p99')).toMatch(/^\d[\d.]* (µs|ms)$/);
    expect(await text(page, 'circuit')).toBe(health.circuit);
    expect(await text(page, 'pending')).toBe(String(health.pendingStoreCalls));
    expect(await text(page, 'leased-tokens')).toBe(String(health.leases.tokens));
    expect(await text(page, 'leased-keys')).toBe(String(health.leases.keys));
    expect(await text(page, 'store')).toBe('memory');

    // uPlot drew a chart per policy and the two store charts.
    expect(await page.locator('.uplot canvas').count()).toBe(Object.keys(POLICIES).length + 2);
    // Read-only.
    expect(await page.locator('form, input, button, select, textarea').count()).toBe(0);

    const shot = process.env.LIVE_PAGE_SCREENSHOT ? resolve(process.env.LIVE_PAGE_SCREENSHOT) : join(tmpdir(), 'edge-limiter-live-page.png');
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`[live-page] screenshot: ${shot}`);

    expect(problems).toEqual([]);
    const foreign = requests.filter((u) => new URL(u).origin !== metricsUrl);
    expect(foreign).toEqual([]);
    expect(requests.some((u) => u.endsWith('/live/live.js'))).toBe(true);
    expect(requests.some((u) => new URL(u).pathname === '/x')).toBe(false);
    await page.close();
  });
});
