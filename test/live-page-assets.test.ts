// The live page's assets and routes: the committed bundle is what scripts/build-live-page.ts builds now
// from the page's source and the installed uplot (stale otherwise), the HTML needs nothing inline or
// from another origin, and every answer carries the Content-Security-Policy that says so.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { bundleLivePage, LIVE_BUILD_DIR, LIVE_PAGE_DIR } from '../scripts/build-live-page.js';
import { createLivePage, LIVE_CSP } from '../functions/app/live.js';
import { createLimiter, memoryStore } from '../src/index.js';
import { createDecisionStats } from '../src/limiter/decision-stats.js';
import { composeOnDecision } from '../functions/app/stats.js';

describe('live page assets', () => {
  it('the committed bundle is up to date with page.ts, page.css and the installed uplot (npm run build:live-page)', async () => {
    const built = await bundleLivePage();
    expect([...built.keys()].sort()).toEqual(['live.css', 'live.js']);
    for (const [name, text] of built) {
      const committed = readFileSync(join(LIVE_BUILD_DIR, name), 'utf8');
      expect(committed === text, `functions/app/live-page/bundle/${name} is stale: run npm run build:live-page`).toBe(true);
    }
    const uplot = JSON.parse(readFileSync('node_modules/uplot/package.json', 'utf8')).version;
    // uPlot itself is in the bundle (its legend and cursor classes), with its licence notice.
    expect(built.get('live.js')).toContain(`uPlot ${uplot}`);
    expect(built.get('live.js')).toContain('u-legend');
    expect(built.get('live.css')).toContain('.u-legend');
  });

  it('the HTML loads only its own assets: no inline script, style or handler, no other origin', () => {
    const html = readFileSync(join(LIVE_PAGE_DIR, 'index.html'), 'utf8');
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.length).toBe(1);
    for (const [, attrs, body] of scripts) {
      expect(attrs).toMatch(/\bsrc="live\/live\.js"/);
      expect(body!.trim()).toBe('');
    }
    expect(html).not.toMatch(/<style\b/i);
    expect(html).not.toMatch(/\sstyle=/i);
    expect(html).not.toMatch(/\son[a-z]+=/i);
    for (const [, url] of html.matchAll(/\b(?:src|href)="([^"]*)"/g)) expect(url, url).toMatch(/^(live\/|live\.json$|stats\.json$|metrics$)/);
  });
});

describe('live page routes (metrics port)', () => {
  async function mounted() {
    const stats = createDecisionStats({ policies: ['api'] });
    const live = createLivePage({ policies: ['api'] });
    const limiter = createLimiter({ store: memoryStore(), policies: { api: { capacity: 2, refillPerSecond: 0.001 } }, onDecision: composeOnDecision(stats.onDecision, live.onDecision) });
    const app = new Hono();
    live.mount(app, { limiter, stats });
    return { app, limiter };
  }

  it('serve the page and its assets with the CSP, nosniff and their types', async () => {
    const { app } = await mounted();
    for (const [path, type] of [
      ['/', 'text/html; charset=utf-8'],
      ['/live/live.js', 'text/javascript; charset=utf-8'],
      ['/live/live.css', 'text/css; charset=utf-8'],
      ['/live/favicon.svg', 'image/svg+xml'],
      ['/live.json', 'application/json'],
    ] as const) {
      const res = await app.request(path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type'), path).toBe(type);
      expect(res.headers.get('content-security-policy'), path).toBe(LIVE_CSP);
      expect(res.headers.get('x-content-type-options'), path).toBe('nosniff');
    }
    expect(LIVE_CSP).toBe("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    expect(await (await app.request('/live/live.js')).text()).toBe(readFileSync(join(LIVE_BUILD_DIR, 'live.js'), 'utf8'));
  });

  it('/live.json: the series since start, the limiter\'s stats and the refused keys', async () => {
    const { app, limiter } = await mounted();
    for (let i = 0; i < 5; i++) await limiter.take('api', 'k1');
    await limiter.take('api', 'k2');
    const w = await (await app.request('/live.json')).json();
    expect(Object.keys(w).sort()).toEqual(['circuit', 'current', 'decisions', 'from', 'latency', 'leasedTokens', 'now', 'outcomes', 'pending', 'stats', 'store', 'window']);
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    expect(sum(w.decisions.api.allowed)).toBe(3);
    expect(sum(w.decisions.api.denied)).toBe(3);
    expect(w.window.storeCalls).toBe(6);
    expect(w.store).toBe('memory');
    expect(w.current).toEqual(limiter.stats());
    expect(w.pending.at(-1)).toBe(0);
    expect(w.circuit.at(-1)).toBe('closed');
    expect(w.stats.policies.api.topRefused).toMatchObject([{ key: 'k1', count: 3 }]);
    const later = await (await app.request(`/live.json?since=${w.now}`)).json();
    expect(later.from).toBe(w.now);
    expect((await app.request('/live.json?since=garbage')).status).toBe(200);
  });
});
