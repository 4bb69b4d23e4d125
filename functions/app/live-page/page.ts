// The live page's script, run in the browser. scripts/build-live-page.ts bundles it with uPlot into
// ./bundle/live.js (and page.css with uPlot's styles into ./bundle/live.css). It polls live.json once a
// second and keeps the last 15 minutes: a chart of decisions per second by outcome for each policy,
// store latency p50/p99, pending store calls, leased tokens and the circuit, and as text the totals and
// the most refused keys. Keys are written with textContent only: they come from clients.
import uPlot from 'uplot';
import type { LimiterStats } from '../../../src/limiter.js';
import type { DecisionStatsSnapshot } from '../../../src/limiter/decision-stats.js';
import type { LiveWindow } from '../live-series.js';

type Live = LiveWindow & { store: string; current: LimiterStats; stats: DecisionStatsSnapshot };

const SLOTS = 900;
const POLL_MS = 1000;
const COLORS: Record<string, string> = {
  allowed: '#2f9e5b',
  denied: '#d64545',
  store_error: '#e08a1e',
  deny_cache: '#8e5cd9',
  lease: '#2f7fd8',
  local: '#159a9a',
  blocked: '#5b2a86',
};
const CIRCUIT_LEVEL: Record<string, number> = { closed: 0, 'half-open': 1, open: 2 };

/** The series the page holds, aligned on seconds from `from` to `now`. */
interface Held {
  from: number;
  now: number;
  decisions: Record<string, Record<string, number[]>>;
  p50: (number | null)[];
  p99: (number | null)[];
  pending: (number | null)[];
  leasedTokens: (number | null)[];
  circuit: (number | null)[];
}

let held: Held | undefined;
let polls = 0;
const charts = new Map<string, { plot: uPlot; el: HTMLElement }>();

function $(testid: string): HTMLElement {
  return document.querySelector(`[data-testid="${testid}"]`) as HTMLElement;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, text?: string | number, attrs: Record<string, string> = {}): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

/** Splices a newer window onto what is held (the last second held is re-sent whole), keeping 900 s. */
function merge(w: Live): Held {
  const fresh: Held = {
    from: w.from,
    now: w.now,
    decisions: w.decisions,
    p50: w.latency.p50,
    p99: w.latency.p99,
    pending: w.pending,
    leasedTokens: w.leasedTokens,
    circuit: w.circuit.map((c) => (c === null ? null : CIRCUIT_LEVEL[c]!)),
  };
  if (!held || w.from < held.from || w.from > held.now + 1) return fresh;
  const cut = w.from - held.from;
  const drop = Math.max(0, w.now - SLOTS + 1 - held.from);
  const join = <T>(old: T[], add: T[]) => old.slice(0, cut).concat(add).slice(drop);
  const decisions: Held['decisions'] = {};
  for (const [p, byOutcome] of Object.entries(w.decisions)) {
    decisions[p] = {};
    for (const [o, values] of Object.entries(byOutcome)) decisions[p]![o] = join(held.decisions[p]?.[o] ?? new Array(cut).fill(0), values);
  }
  return {
    from: held.from + drop,
    now: w.now,
    decisions,
    p50: join(held.p50, fresh.p50),
    p99: join(held.p99, fresh.p99),
    pending: join(held.pending, fresh.pending),
    leasedTokens: join(held.leasedTokens, fresh.leasedTokens),
    circuit: join(held.circuit, fresh.circuit),
  };
}

/**
 * The seconds charted: all held but the current one, which is still filling (drawn, it would always
 * dip at the right edge). The totals below count it.
 */
function xs(h: Held): number[] {
  return Array.from({ length: Math.max(0, h.now - h.from) }, (_, i) => h.from + i);
}

/** A held series cut to the charted seconds. */
function charted<T>(values: T[]): T[] {
  return values.slice(0, -1);
}

function widthOf(container: HTMLElement): number {
  return Math.max(280, Math.floor(container.clientWidth));
}

/** A duration in ms as people read it: `8.1 µs`, `0.42 ms` below 1 ms is shown in µs, else `12.5 ms`. */
function fmtMs(v: number | null | undefined): string {
  if (v === null || v === undefined) return '–';
  return v < 1 ? `${Number((v * 1000).toPrecision(2))} µs` : `${Number(v.toPrecision(3))} ms`;
}

const clock = (iso: string) => new Date(iso).toLocaleTimeString([], { hour12: false });

function timeAxis(): uPlot.Axis {
  return { stroke: '#5b6478', grid: { stroke: '#eceef3', width: 1 }, ticks: { stroke: '#d8dce5', width: 1 } };
}

function valueAxis(label: string, extra: Partial<uPlot.Axis> = {}): uPlot.Axis {
  return { label, stroke: '#5b6478', size: 56, labelSize: 18, grid: { stroke: '#eceef3', width: 1 }, ticks: { stroke: '#d8dce5', width: 1 }, ...extra };
}

function ensureChart(key: string, container: HTMLElement, opts: Omit<uPlot.Options, 'width' | 'height'>, data: uPlot.AlignedData, height = 210): void {
  const have = charts.get(key);
  if (have) {
    have.plot.setData(data);
    return;
  }
  // The legend names the series (live values under a cursor would only add a row of dashes).
  const plot = new uPlot({ ...opts, width: widthOf(container), height, legend: { live: false }, cursor: { drag: { x: false, y: false } } } as uPlot.Options, data, container);
  charts.set(key, { plot, el: container });
}

function drawPolicyCharts(h: Held, outcomes: readonly string[]): void {
  const root = document.getElementById('policy-charts')!;
  for (const policy of Object.keys(h.decisions)) {
    let box = root.querySelector<HTMLElement>(`[data-policy-chart="${CSS.escape(policy)}"]`);
    if (!box) {
      const panel = el('div', undefined, { class: 'panel' });
      panel.append(el('h3', policy, { class: 'policy-name' }));
      box = el('div', undefined, { class: 'chart', 'data-policy-chart': policy, 'data-testid': `chart-${policy}` });
      panel.append(box);
      root.append(panel);
    }
    const data: uPlot.AlignedData = [xs(h), ...outcomes.map((o) => charted(h.decisions[policy]![o] ?? []))];
    ensureChart(`policy:${policy}`, box, {
      series: [{}, ...outcomes.map((o) => ({ label: o, stroke: COLORS[o] ?? '#777', width: 1.75, points: { show: false }, value: (_u: uPlot, v: number | null) => (v === null ? '–' : String(v)) }))],
      scales: { x: { time: true }, y: { range: (_u: uPlot, _min: number, max: number) => [0, Math.max(4, Math.ceil((max || 0) * 1.15))] } },
      axes: [timeAxis(), valueAxis('per second')],
    }, data);
  }
}

function drawStoreCharts(h: Held): void {
  const x = xs(h);
  ensureChart('latency', document.getElementById('latency-chart')!, {
    series: [
      {},
      { label: 'p50', stroke: '#2f7fd8', width: 1.75, points: { show: false }, value: (_u, v) => fmtMs(v) },
      { label: 'p99', stroke: '#d64545', width: 1.75, points: { show: false }, value: (_u, v) => fmtMs(v) },
    ],
    scales: {
      x: { time: true },
      y: {
        distr: 3,
        log: 10,
        range: (_u, min, max) => {
          const lo = Number.isFinite(min) && min > 0 ? 10 ** Math.floor(Math.log10(min)) : 0.001;
          const hi = Number.isFinite(max) && max > 0 ? 10 ** Math.ceil(Math.log10(max)) : 1;
          return [lo, Math.max(hi, lo * 10)];
        },
      },
    },
    axes: [
      timeAxis(),
      valueAxis('ms', {
        // One line per decade: 0.01, 0.1, 1, 10 ms...
        splits: (_u, _i, min, max) => {
          const out: number[] = [];
          for (let e = Math.ceil(Math.log10(min) - 1e-9); e <= Math.floor(Math.log10(max) + 1e-9); e++) out.push(Number((10 ** e).toPrecision(1)));
          return out;
        },
        values: (_u, splits) => splits.map((v) => (v == null ? '' : String(v))),
      }),
    ],
  }, [x, charted(h.p50), charted(h.p99)]);
  ensureChart('store', document.getElementById('store-chart')!, {
    series: [
      {},
      { label: 'pending calls', stroke: '#8e5cd9', width: 1.75, points: { show: false } },
      { label: 'leased tokens', stroke: '#2f9e5b', width: 1.75, points: { show: false } },
      {
        label: 'circuit',
        scale: 'circuit',
        stroke: '#e08a1e',
        width: 1.5,
        points: { show: false },
        paths: uPlot.paths.stepped!({ align: 1 }),
        value: (_u, v) => (v === null ? '–' : ['closed', 'half-open', 'open'][v] ?? '–'),
      },
    ],
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(4, Math.ceil((max || 0) * 1.15))] }, circuit: { range: [0, 2.2] } },
    axes: [
      timeAxis(),
      valueAxis('count'),
      { scale: 'circuit', side: 1, stroke: '#e08a1e', size: 72, grid: { show: false }, splits: () => [0, 1, 2], values: (_u, splits) => splits.map((v) => ['closed', 'half-open', 'open'][v] ?? '') },
    ],
  }, [x, charted(h.pending), charted(h.leasedTokens), charted(h.circuit)]);
}

function renderNow(w: Live): void {
  $('store').textContent = w.store;
  $('since').textContent = new Date(w.stats.since).toLocaleString([], { hour12: false });
  const circuit = $('circuit');
  circuit.textContent = w.current.circuit;
  circuit.dataset.state = w.current.circuit;
  $('pending').textContent = String(w.current.pendingStoreCalls);
  $('max-pending').textContent = String(w.current.maxPendingStoreCalls);
  $('leased-tokens').textContent = String(w.current.leases.tokens);
  $('leased-keys').textContent = String(w.current.leases.keys);
  $('p50').textContent = fmtMs(w.window.p50);
  $('p99').textContent = fmtMs(w.window.p99);
  $('store-calls').textContent = String(w.window.storeCalls);
  $('top-keys').textContent = String(w.stats.topKeys);
}

/** Totals since the server started (from its counters) and over the 15 minutes held (summed from the charts' series). */
function renderTotals(w: Live, h: Held): void {
  const table = $('totals') as HTMLTableElement;
  const head = el('tr');
  head.append(el('th', 'policy'), el('th', ''));
  for (const o of w.outcomes) {
    const th = el('th', o);
    th.prepend(el('i', undefined, { class: `dot dot-${o}` }));
    head.append(th);
  }
  head.append(el('th', 'peeks'), el('th', 'refused'));
  table.tHead!.replaceChildren(head);
  const rows: HTMLTableRowElement[] = [];
  for (const [policy, s] of Object.entries(w.stats.policies)) {
    const total = el('tr', undefined, { class: 'first' });
    total.append(el('th', policy, { rowspan: '2', scope: 'row' }), el('td', 'since start', { class: 'what' }));
    for (const o of w.outcomes) total.append(el('td', s.decisions[o] ?? 0, { 'data-testid': `total-${policy}-${o}` }));
    total.append(el('td', s.peeks, { 'data-testid': `peeks-${policy}` }), el('td', s.refused, { 'data-testid': `refused-${policy}` }));
    const recent = el('tr');
    recent.append(el('td', 'last 15 min', { class: 'what' }));
    for (const o of w.outcomes) {
      const sum = (h.decisions[policy]?.[o] ?? []).reduce((a, b) => a + b, 0);
      recent.append(el('td', sum, { 'data-testid': `window-${policy}-${o}` }));
    }
    recent.append(el('td', ''), el('td', ''));
    rows.push(total, recent);
  }
  table.tBodies[0]!.replaceChildren(...rows);
}

function renderRefused(w: Live): void {
  const root = document.getElementById('refused')!;
  const blocks: HTMLElement[] = [];
  for (const [policy, s] of Object.entries(w.stats.policies)) {
    const block = el('div', undefined, { class: 'panel' });
    block.append(el('h3', policy, { class: 'policy-name' }));
    if (s.topRefused.length === 0) {
      block.append(el('p', w.stats.topKeys === 0 ? 'The summary is off (LIMITER_TOP_KEYS=0).' : 'No key refused yet.', { class: 'muted', 'data-testid': `refused-none-${policy}` }));
    } else {
      const table = el('table', undefined, { class: 'keys', 'data-testid': `top-${policy}` });
      const head = el('tr');
      for (const h of ['#', 'key', 'refusals', '±', 'first refused', 'last refused']) head.append(el('th', h));
      table.append(el('thead'), el('tbody'));
      table.tHead!.append(head);
      s.topRefused.forEach((e, i) => {
        const row = el('tr', undefined, { 'data-testid': 'refused-row' });
        row.append(
          el('td', i + 1, { class: 'rank' }),
          el('td', e.key, { class: 'key', 'data-testid': 'refused-key', title: e.key }),
          el('td', e.count, { 'data-testid': 'refused-count' }),
          el('td', e.error, { 'data-testid': 'refused-error' }),
          el('td', clock(e.firstSeen)),
          el('td', clock(e.lastSeen)),
        );
        table.tBodies[0]!.append(row);
      });
      block.append(table);
    }
    blocks.push(block);
  }
  root.replaceChildren(...blocks);
}

function setStatus(state: 'live' | 'offline', text: string): void {
  const s = $('status');
  s.dataset.state = state;
  s.textContent = text;
}

async function poll(): Promise<void> {
  try {
    const res = await fetch(held ? `live.json?since=${held.now}` : 'live.json', { cache: 'no-store' });
    if (!res.ok) throw new Error(`live.json answered ${res.status}`);
    const w = (await res.json()) as Live;
    held = merge(w);
    renderNow(w);
    drawPolicyCharts(held, w.outcomes);
    drawStoreCharts(held);
    renderTotals(w, held);
    renderRefused(w);
    polls++;
    document.body.dataset.polls = String(polls);
    document.body.dataset.now = String(w.now);
    setStatus('live', `live · ${new Date(w.now * 1000).toLocaleTimeString([], { hour12: false })}`);
  } catch {
    setStatus('offline', 'offline · retrying');
  } finally {
    setTimeout(() => void poll(), POLL_MS);
  }
}

window.addEventListener('resize', () => {
  for (const { plot, el: box } of charts.values()) plot.setSize({ width: widthOf(box), height: plot.height });
});

void poll();
