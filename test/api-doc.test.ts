// docs/api.md is the API reference generated from the code: the committed page is what
// scripts/build-api-doc.ts builds now from the declarations of src/ (stale otherwise), it covers every
// subpath of package.json "exports", and every export has a doc comment.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { API_DOC, readApi, renderApi } from '../scripts/build-api-doc.js';

describe('the API reference (docs/api.md)', () => {
  const api = readApi();

  it('covers every subpath of package.json "exports", and the names each entry exports', async () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { exports: Record<string, unknown> };
    const subpaths = Object.keys(pkg.exports).filter((s) => s !== './package.json').map((s) => (s === '.' ? 'edge-limiter' : `edge-limiter/${s.slice(2)}`));
    expect(api.map((s) => s.specifier)).toEqual(subpaths);
    // What each subpath exports at run time is in the page (types add to it; nothing is left out).
    for (const sub of api) {
      const file = new URL(`../src/${sub.specifier === 'edge-limiter' ? 'index' : entryOf(sub.specifier)}.ts`, import.meta.url).href;
      const runtime = Object.keys((await import(/* @vite-ignore */ file)) as object);
      const listed = sub.entries.map((e) => e.name);
      for (const name of runtime) expect(listed, `${sub.specifier} exports ${name}`).toContain(name);
    }
  });

  it('gives every export a doc comment', () => {
    const missing = api.flatMap((s) => s.entries.filter((e) => !e.doc.trim()).map((e) => `${s.specifier}: ${e.name}`));
    expect(missing).toEqual([]);
  });

  it('is up to date with the code (npm run build:api-doc)', () => {
    expect(readFileSync(API_DOC, 'utf8') === renderApi(api), 'docs/api.md is stale: run npm run build:api-doc').toBe(true);
  });
});

function entryOf(specifier: string): string {
  const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { exports: Record<string, { types: string }> };
  return pkg.exports[`./${specifier.split('/')[1]}`]!.types.replace(/^\.\/dist\//, '').replace(/\.d\.ts$/, '');
}
