// Reads the guides' tables and blocks that tests hold the code to: the metrics table of
// docs/operating.md and the X-RateLimit-Reason values of the header block in docs/headers.md.
import { readFileSync } from 'node:fs';

/** A guide's text: `guide('operating.md')` is docs/operating.md. */
export const guide = (name: string): string => readFileSync(new URL(`../../docs/${name}`, import.meta.url), 'utf8');

/** The cells of each body row of the Markdown table whose header row is exactly `header`. */
export function table(text: string, header: string): string[][] {
  const lines = text.split('\n');
  const start = lines.indexOf(header);
  if (start < 0) throw new Error(`docs: no table with the header ${header}`);
  const rows: string[][] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(line.slice(1, line.endsWith('|') ? -1 : undefined).split('|').map((c) => c.trim()));
  }
  return rows;
}

export interface MetricRow {
  /** As written: a full name, or a prefix ending in `*` (`process_*`). */
  metric: string;
  /** `counter` or `histogram` when the row says so. */
  type?: string;
  /** Label name -> the values the table lists for it (empty for free-form labels such as `policy`). */
  labels: Map<string, string[]>;
}

/**
 * The metrics table of docs/operating.md (`| metric | label | value: what it counts |`). An empty metric or label
 * cell continues the row above; a value cell that starts with `` `value`: `` lists that value.
 */
export function metricsTable(text = guide('operating.md')): MetricRow[] {
  const out: MetricRow[] = [];
  let label: string | undefined;
  for (const [metricCell, labelCell, valueCell] of table(text, '| metric | label | value: what it counts |')) {
    if (metricCell) {
      const names = [...metricCell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
      if (names.length === 0) throw new Error(`docs/operating.md metrics table: no metric name in ${metricCell}`);
      const type = /\((counter|histogram|gauge)\)/.exec(metricCell)?.[1];
      for (const metric of names) out.push({ metric, ...(type ? { type } : {}), labels: new Map() });
      label = undefined;
    }
    const row = out.at(-1);
    if (!row) throw new Error('docs/operating.md metrics table: a row before any metric');
    if (labelCell) {
      label = /^`([^`]+)`$/.exec(labelCell)?.[1];
      if (!label) throw new Error(`docs/operating.md metrics table: label cell ${labelCell} is not one \`name\``);
      row.labels.set(label, []);
    }
    const value = /^`([^`]+)`:/.exec(valueCell ?? '')?.[1];
    if (value !== undefined) {
      if (!label) throw new Error(`docs/operating.md metrics table: value ${value} under no label`);
      row.labels.get(label)!.push(value);
    }
  }
  return out;
}

/**
 * The values the header block of docs/headers.md lists for X-RateLimit-Reason: the lines indented under it, each
 * starting with one value.
 */
export function reasonHeaderValues(text = guide('headers.md')): string[] {
  const lines = text.split('\n');
  const at = lines.findIndex((l) => l.startsWith('X-RateLimit-Reason:'));
  if (at < 0) throw new Error('docs/headers.md: no X-RateLimit-Reason line in the header block');
  const values: string[] = [];
  for (const line of lines.slice(at + 1)) {
    const m = /^\s{2,}([a-z_]+)\s/.exec(line);
    if (!m) break;
    values.push(m[1]!);
  }
  return values;
}
