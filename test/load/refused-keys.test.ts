// The refused-keys summary is bounded by K x policies whatever the traffic: a million distinct refused
// keys through a real limiter (onDecision -> createDecisionStats) in a child process with --expose-gc.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = (env: Record<string, string>) =>
  promisify(execFile)(process.execPath, ['--expose-gc', '--import', 'tsx', fileURLToPath(new URL('../support/refused-keys-child.ts', import.meta.url))], {
    env: { ...process.env, ...env },
    maxBuffer: 16 * 2 ** 20,
  }).then(({ stdout }) => JSON.parse(stdout.trim().split('\n').pop()!));

/** What K = 100 entries on each of two policies may hold on the heap, with room for GC timing. */
const CEILING_MB = 8;

describe('refused keys: bounded memory', () => {
  it(`a million distinct refused keys keep K entries per policy and under ${CEILING_MB} MB of heap; the heavy keys rank first`, { timeout: 120_000 }, async () => {
    const r = await run({ KEYS: '1000000', TOP_KEYS: '100' });
    console.log(`[refused-keys] ${JSON.stringify(r)}`);
    expect(r.refusedDistinct).toBe(1_000_000);
    expect(r.entries).toEqual({ a: 100, b: 100 });
    expect(r.heapGrowthMB).toBeLessThan(CEILING_MB);
    // The same keys in an unbounded summary take an order of magnitude more: the bound above is not slack.
    expect(r.mapMB).toBeGreaterThan(10 * CEILING_MB);
    expect(r.top3).toEqual({ a: ['attacker-1', 'attacker-2', 'attacker-3'], b: ['attacker-1', 'attacker-2', 'attacker-3'] });
  });

  it('with K = 0 no key is kept at all', { timeout: 120_000 }, async () => {
    const r = await run({ KEYS: '200000', TOP_KEYS: '0' });
    expect(r.entries).toEqual({ a: 0, b: 0 });
    expect(r.refused.a + r.refused.b).toBeGreaterThanOrEqual(200_000);
    expect(r.heapGrowthMB).toBeLessThan(CEILING_MB);
  });
});
