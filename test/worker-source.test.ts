// The source the Worker is bundled from (scripts/build-worker-deps.mjs buildWorkerSource, wrangler.toml's
// main): functions/ and src/ copied, the Redis scripts' modules without indentation. The scripts they make
// must be the very ones Node sends (the SHA1 each call names included), and nothing else may differ.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { buildWorkerSource, LUA_SOURCE } from '../scripts/build-worker-deps.mjs';
import { GCRA_BATCH_SCRIPT, GCRA_BATCH_SCRIPT_SHA, GCRA_SCRIPT, GCRA_SCRIPT_SHA } from '../src/stores/redis-script.js';
import { OVERRIDE_SCRIPT, OVERRIDE_SCRIPT_SHA } from '../src/stores/redis-override.js';
import { createHash } from 'node:crypto';

// Under build/ (ignored by git), so that the copy resolves the repository's node_modules as the Worker's does.
const root = join(import.meta.dirname, '..');
mkdirSync(join(root, 'build'), { recursive: true });
const dir = mkdtempSync(join(root, 'build', 'test-worker-source-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
buildWorkerSource(dir);

const files = (d: string): string[] => readdirSync(d).flatMap((n) => (statSync(join(d, n)).isDirectory() ? files(join(d, n)) : [join(d, n)]));
const sha1 = (s: string) => createHash('sha1').update(s).digest('hex');

describe('the Worker\'s source copy', () => {
  it('holds every file of functions/ and src/, each the same but the Redis scripts\' modules, which lose only their indentation', () => {
    const want = ['functions', 'src'].flatMap((d) => files(join(root, d))).map((f) => relative(root, f)).sort();
    expect(files(dir).map((f) => relative(dir, f)).sort()).toEqual(want);
    let flushed = 0;
    for (const f of want) {
      const [source, copy] = [readFileSync(join(root, f), 'utf8'), readFileSync(join(dir, f), 'utf8')];
      if (f.startsWith('src/stores/') && LUA_SOURCE.test(f.split('/').pop()!)) {
        flushed++;
        expect(copy, f).toBe(source.replace(/\n +/g, '\n'));
        expect(copy.length, f).toBeLessThan(source.length);
      } else expect(copy, f).toBe(source);
    }
    expect(flushed).toBeGreaterThanOrEqual(10);
  });

  it('makes the scripts Node sends, byte for byte, under the SHA1s both name', async () => {
    const script = (await import(pathToFileURL(join(dir, 'src/stores/redis-script.ts')).href)) as typeof import('../src/stores/redis-script.js');
    const override = (await import(pathToFileURL(join(dir, 'src/stores/redis-override.ts')).href)) as typeof import('../src/stores/redis-override.js');
    expect(script.GCRA_SCRIPT).toBe(GCRA_SCRIPT);
    expect(script.GCRA_BATCH_SCRIPT).toBe(GCRA_BATCH_SCRIPT);
    expect(override.OVERRIDE_SCRIPT).toBe(OVERRIDE_SCRIPT);
    expect([script.GCRA_SCRIPT_SHA, script.GCRA_BATCH_SCRIPT_SHA, override.OVERRIDE_SCRIPT_SHA]).toEqual([sha1(GCRA_SCRIPT), sha1(GCRA_BATCH_SCRIPT), sha1(OVERRIDE_SCRIPT)]);
    expect([GCRA_SCRIPT_SHA, GCRA_BATCH_SCRIPT_SHA, OVERRIDE_SCRIPT_SHA]).toEqual([sha1(GCRA_SCRIPT), sha1(GCRA_BATCH_SCRIPT), sha1(OVERRIDE_SCRIPT)]);
    // Sent flushed: no line of a script starts with a space.
    for (const s of [GCRA_SCRIPT, GCRA_BATCH_SCRIPT, OVERRIDE_SCRIPT]) expect(s).not.toMatch(/\n /);
  });
});
