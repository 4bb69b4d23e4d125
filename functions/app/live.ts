// The live page on the Node server's metrics port: GET / (the page), /live/* (its assets, built from the
// uplot package into functions/app/live-page/bundle/ by scripts/build-live-page.ts and committed) and
// /live.json (what the page polls). Read-only and without a token, like /metrics: the port binds to
// HOST, loopback by default. Every answer carries a Content-Security-Policy that allows this origin's
// scripts, styles, images and fetches only: no inline script or style, no other origin.
import { readFileSync } from 'node:fs';
import type { Hono } from 'hono';
import type { Limiter } from '../../src/limiter.js';
import type { DecisionStats } from '../../src/limiter/decision-stats.js';
import { createLiveSeries, type LiveSeries } from './live-series.js';

export const LIVE_CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** Refused keys per policy sent to the page (the snapshot at /stats.json has all K). */
const PAGE_TOP_KEYS = 20;

export const SECURITY_HEADERS = {
  'Content-Security-Policy': LIVE_CSP,
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

function asset(path: string): string {
  const url = new URL(`./live-page/${path}`, import.meta.url);
  try {
    return readFileSync(url, 'utf8');
  } catch (err) {
    throw new Error(`the live page's asset ${path} is missing (${(err as Error).message}); run npm run build:live-page`);
  }
}

const ASSETS: Record<string, { file: string; type: string }> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/live/live.js': { file: 'bundle/live.js', type: 'text/javascript; charset=utf-8' },
  '/live/live.css': { file: 'bundle/live.css', type: 'text/css; charset=utf-8' },
  '/live/favicon.svg': { file: 'favicon.svg', type: 'image/svg+xml' },
};

export interface LivePage {
  /** Pass to (or compose into) the limiter's onDecision. */
  onDecision: LiveSeries['onDecision'];
  /** Adds the page's routes to the metrics port's app and starts sampling limiter.stats() once a second. */
  mount(app: Hono, context: { limiter: Limiter; stats: DecisionStats }): void;
}

/**
 * The page's time series (900 one-second slots) for these policies; mount it once the limiter exists.
 * Throws when the built assets are missing, so that the server does not start without its page.
 */
export function createLivePage(options: { policies: readonly string[] }): LivePage {
  let limiter: Limiter | undefined;
  const series = createLiveSeries({
    policies: options.policies,
    stats: () => limiter!.stats(),
  });
  // Read now, so a missing build fails the start rather than the first page view.
  const files = new Map(Object.entries(ASSETS).map(([route, a]) => [route, { body: asset(a.file), type: a.type }]));
  return {
    onDecision: series.onDecision,
    mount(app, context) {
      limiter = context.limiter;
      series.sample();
      setInterval(() => series.sample(), 1000).unref();
      for (const [route, file] of files) {
        app.get(route, () => new Response(file.body, { headers: { ...SECURITY_HEADERS, 'Content-Type': file.type } }));
      }
      app.get('/live.json', (c) => {
        const since = c.req.query('since');
        series.sample();
        const body = {
          ...series.window(since === undefined || !/^\d{1,12}$/.test(since) ? undefined : Number(since)),
          store: context.limiter.store.name,
          current: context.limiter.stats(),
          stats: context.stats.snapshot(PAGE_TOP_KEYS),
        };
        return new Response(JSON.stringify(body), { headers: { ...SECURITY_HEADERS, 'Content-Type': 'application/json' } });
      });
    },
  };
}
