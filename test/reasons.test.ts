// Every value of DecisionReason (src/core/decision.ts) is documented where a reason reaches people:
// the X-RateLimit-Reason values of the header block of docs/headers.md, the doc of src/http/headers.ts, and the
// outcome values of the metrics table in docs/operating.md.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { DecisionReason } from '../src/core/decision.js';
import { metricsTable, reasonHeaderValues } from './support/guides.js';

/** The string literals of the DecisionReason union, read from its source (comments stripped). */
function reasonsInSource(): string[] {
  const source = readFileSync(new URL('../src/core/decision.ts', import.meta.url), 'utf8');
  const code = source.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
  const union = /export type DecisionReason =([^;]*);/.exec(code)?.[1];
  if (union === undefined) throw new Error('src/core/decision.ts: no `export type DecisionReason =`');
  return [...union.matchAll(/'([^']+)'/g)].map((m) => m[1]!);
}

// Adding a reason to the type fails the type-check here until it is added; the test below then holds
// the parse of the source to the same list, and the documents to it.
const TYPED: Record<DecisionReason, true> = { store_error: true, deny_cache: true, lease: true, local: true, blocked: true };

describe('decision reasons', () => {
  const reasons = reasonsInSource();

  it('are read from the DecisionReason type', () => {
    expect(reasons.length).toBeGreaterThan(0);
    expect([...reasons].sort()).toEqual(Object.keys(TYPED).sort());
  });

  it('each is an X-RateLimit-Reason value in the header block of docs/headers.md, and nothing else is', () => {
    expect(reasonHeaderValues().sort()).toEqual([...reasons].sort());
  });

  it('each is named in the X-RateLimit-Reason line of src/http/headers.ts', () => {
    const doc = readFileSync(new URL('../src/http/headers.ts', import.meta.url), 'utf8');
    const line = /X-RateLimit-Reason` when[^\n]*\n[^\n]*/.exec(doc)?.[0] ?? '';
    for (const r of reasons) expect(line, `headers.ts does not name ${r}`).toMatch(new RegExp(`\\b${r}\\b`));
  });

  it('each is an outcome value in the metrics table of docs/operating.md', () => {
    const outcomes = metricsTable().find((r) => r.metric === 'edge_limiter_decisions_total')?.labels.get('outcome') ?? [];
    for (const r of reasons) expect(outcomes, `the metrics table does not list outcome ${r}`).toContain(r);
  });
});
