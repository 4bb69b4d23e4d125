// The house's shape: no import circle among the modules of src/ (type-only imports count: a module that
// imports its parent's types back is a split half done), and no file in src/ over about 400 lines.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../src/', import.meta.url));

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

/** The relative imports of a module (static, `export … from`, side-effect and dynamic), as .ts paths. */
function relativeImports(file: string, text: string): string[] {
  const specs = [...text.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)['"](\.{1,2}\/[^'"]+)['"]/g)].map((m) => m[1]!);
  return specs.map((s) => resolve(dirname(file), s.replace(/\.js$/, '.ts')));
}

/** Every import circle in a module graph, each as the path that closes it (first module repeated at the end). */
function importCircles(graph: Map<string, string[]>): string[][] {
  const circles: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (node: string) => {
    state.set(node, 'open');
    stack.push(node);
    for (const next of graph.get(node) ?? []) {
      if (state.get(next) === 'open') circles.push([...stack.slice(stack.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, 'done');
  };
  for (const node of [...graph.keys()].sort()) if (!state.has(node)) visit(node);
  return circles;
}

/** About a page and a half of a module's own code: past it, a file holds two things (STYLE.md, 11). */
const MAX_LINES = 400;

const files = sourceFiles(SRC);
const graph = new Map(files.map((f) => [f, relativeImports(f, readFileSync(f, 'utf8'))]));

describe('the house', () => {
  it('finds a circle when there is one (the walker itself)', () => {
    const a = '/x/a.ts';
    const b = '/x/b/c.ts';
    expect(relativeImports(a, "import type { T } from './b/c.js';\nexport { u } from \"./d.js\";\nconst m = import('../e.js');")).toEqual([b, '/x/d.ts', '/e.ts']);
    expect(importCircles(new Map([[a, [b]], [b, [a]]]))).toEqual([[a, b, a]]);
    expect(importCircles(new Map([[a, [b]], [b, []]]))).toEqual([]);
  });

  it('has no import circle in src/', () => {
    for (const [file, imports] of graph) for (const target of imports) expect(graph.has(target), `${relative(SRC, file)} imports ${relative(SRC, target)}, which is not in src/`).toBe(true);
    expect(importCircles(graph).map((c) => c.map((f) => relative(SRC, f)).join(' -> '))).toEqual([]);
  });

  it(`has no file in src/ over ${MAX_LINES} lines`, () => {
    const long = files.map((f) => ({ file: relative(SRC, f), lines: readFileSync(f, 'utf8').split('\n').length - 1 })).filter((f) => f.lines > MAX_LINES);
    expect(files.length).toBeGreaterThan(40);
    expect(long).toEqual([]);
  });

  it('opens each module with a comment that says what it owns', () => {
    expect(files.filter((f) => !readFileSync(f, 'utf8').startsWith('//')).map((f) => relative(SRC, f))).toEqual([]);
  });
});
