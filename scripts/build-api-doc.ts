// Builds docs/api.md, the API reference, from the code: the declarations tsc emits for src/ (the same
// .d.ts files the package ships) and their doc comments, for every subpath in package.json "exports".
// typedoc and api-extractor need the TypeScript compiler API, which TypeScript 7 (this project's
// compiler) does not have; a .d.ts holds only declarations, so reading it needs no compiler.
// test/api-doc.test.ts fails when the page is stale or an export has no doc comment. Run after changing
// an export or its doc comment:
//   npm run build:api-doc
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
export const API_DOC = join(root, 'docs/api.md');

/** One exported name of a subpath, as declared. */
export interface ApiEntry {
  /** The name the subpath exports it as. */
  name: string;
  kind: 'function' | 'class' | 'interface' | 'type' | 'const';
  /** The source file that declares it, relative to the repository (src/...). */
  source: string;
  /** The declaration as the .d.ts has it (a class or interface: its head; a function: each signature). */
  signature: string;
  /** The doc comment's text, without the comment markers; empty when it has none. */
  doc: string;
  /** A class's or interface's members: signature and doc comment. */
  members: { signature: string; doc: string }[];
}

export interface ApiSubpath {
  /** `edge-limiter`, `edge-limiter/redis`, ... */
  specifier: string;
  /** The entry's own opening comment in src/ (what the subpath is for). */
  about: string;
  entries: ApiEntry[];
}

/** The declarations of src/, emitted by tsc into a temporary directory (removed by `done`). */
function emitDeclarations(): { dir: string; done: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'edge-limiter-api-'));
  execFileSync(join(root, 'node_modules/.bin/tsc'), ['-p', join(root, 'tsconfig.build.json'), '--emitDeclarationOnly', '--outDir', dir], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  return { dir, done: () => rmSync(dir, { recursive: true, force: true }) };
}

/** The text of a doc comment (`/** ... *\/`), one paragraph per blank line, `@default x` as "Default: `x`." */
function docText(comment: string): string {
  const lines = comment
    .replace(/^\/\*\*/, '')
    .replace(/\*\/$/, '')
    .split('\n')
    .map((l) => l.replace(/^\s*\* ?/, '').trimEnd());
  const text = lines.join('\n').trim();
  return text.replace(/\s*@default\s+(.+?)\s*$/gm, (_, value: string) => ` (default: \`${value.trim()}\`)`).replace(/\n(?!\n)/g, ' ');
}

/** The doc comment that ends right before `at` (only whitespace between), or ''. */
function docBefore(text: string, at: number): string {
  const before = text.slice(0, at).trimEnd();
  if (!before.endsWith('*/')) return '';
  const start = before.lastIndexOf('/**');
  if (start < 0 || before.lastIndexOf('*/', before.length - 3) > start) return '';
  return docText(before.slice(start));
}

/** The index just past the `{ ... }` block that opens at `open` (a .d.ts has no strings with braces in types we read). */
function blockEnd(text: string, open: number): number {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return i + 1;
  }
  return text.length;
}

/** The index just past a comment or string literal that starts at `i`, or `i` when none does. */
function skipLiteral(text: string, i: number): number {
  if (text.startsWith('/*', i)) return text.indexOf('*/', i + 2) + 2;
  if (text.startsWith('//', i)) return text.indexOf('\n', i);
  const q = text[i];
  if (q === "'" || q === '"' || q === '`') {
    let j = i + 1;
    while (j < text.length && text[j] !== q) j += text[j] === '\\' ? 2 : 1;
    return j + 1;
  }
  return i;
}

/** The top-level statements of `text` (split at `;` outside brackets, comments and strings), each with its start. */
function statements(text: string): { start: number; end: number }[] {
  const out: { start: number; end: number }[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const past = skipLiteral(text, i);
    if (past !== i) {
      i = past - 1;
      continue;
    }
    const ch = text[i];
    if (ch === '{' || ch === '(' || ch === '[' || ch === '<') depth++;
    else if (ch === '}' || ch === ')' || ch === ']' || (ch === '>' && text[i - 1] !== '=')) depth--;
    else if (ch === ';' && depth === 0) {
      out.push({ start, end: i + 1 });
      start = i + 1;
    }
  }
  return out;
}

/** The members of a class or interface body: each top-level statement with its doc comment. */
function members(body: string): { signature: string; doc: string }[] {
  const out: { signature: string; doc: string }[] = [];
  for (const { start, end } of statements(body)) {
    const chunk = body.slice(start, end);
    // The code starts after the comments and whitespace that open the chunk.
    let at = 0;
    for (;;) {
      while (at < chunk.length && /\s/.test(chunk[at]!)) at++;
      const past = chunk.startsWith('/*', at) || chunk.startsWith('//', at) ? skipLiteral(chunk, at) : at;
      if (past === at) break;
      at = past;
    }
    const code = chunk.slice(at).trim();
    if (!code || code.startsWith('private ') || code.startsWith('#private')) continue;
    out.push({ signature: code.replace(/\s+/g, ' ').replace(/;$/, ''), doc: docBefore(chunk, at) });
  }
  return out;
}

/** The statement that starts at `at`, up to its `;` outside brackets, comments and strings. */
function statement(text: string, at: number): string {
  const first = statements(text.slice(at))[0];
  return text.slice(at, at + (first?.end ?? text.length - at));
}

const DECL = /^export (?:declare )?(?:abstract )?(function|class|interface|type|const) ([A-Za-z_$][\w$]*)/gm;

/** Every name a .d.ts exports, resolved to its declaration. */
function exportsOf(dir: string, file: string, seen = new Set<string>()): ApiEntry[] {
  if (seen.has(file)) return [];
  seen.add(file);
  const text = readFileSync(join(dir, file), 'utf8');
  const out: ApiEntry[] = [];
  const resolve = (spec: string) => join(dirname(file), spec.replace(/\.js$/, '.d.ts'));
  // export { a, b as c } from './x.js';  export type { ... } from './x.js';
  for (const m of text.matchAll(/^export (?:type )?\{([^}]*)\} from '([^']+)';/gm)) {
    const target = exportsOf(dir, resolve(m[2]!), new Set());
    for (const part of m[1]!.split(',').map((p) => p.trim().replace(/^type /, '')).filter(Boolean)) {
      const [from, as = from] = part.split(/\s+as\s+/) as [string, string?];
      const entry = target.find((e) => e.name === from);
      if (!entry) throw new Error(`${file}: ${from} is not exported by ${m[2]}`);
      out.push({ ...entry, name: as });
    }
  }
  for (const m of text.matchAll(/^export \* from '([^']+)';/gm)) out.push(...exportsOf(dir, resolve(m[1]!), new Set()));
  // export { a };  export type { a as b };  (an imported name, exported again)
  for (const m of text.matchAll(/^export (?:type )?\{([^}]*)\};/gm)) {
    for (const part of m[1]!.split(',').map((p) => p.trim()).filter(Boolean)) {
      const [local, as = local] = part.split(/\s+as\s+/) as [string, string?];
      const imp = new RegExp(`^import (?:type )?\\{([^}]*\\b${local}\\b[^}]*)\\} from '([^']+)';`, 'm').exec(text);
      if (!imp) throw new Error(`${file}: cannot find where ${local} comes from`);
      const named = new RegExp(`(?:type )?(\\w+)\\s+as\\s+${local}\\b`).exec(imp[1]!)?.[1] ?? local;
      const entry = exportsOf(dir, resolve(imp[2]!), new Set()).find((e) => e.name === named);
      if (!entry) throw new Error(`${file}: ${named} is not exported by ${imp[2]}`);
      out.push({ ...entry, name: as });
    }
  }
  const source = join('src', file.replace(/\.d\.ts$/, '.ts'));
  for (const m of text.matchAll(DECL)) {
    const [, kind, name] = m as unknown as [string, ApiEntry['kind'], string];
    if (out.some((e) => e.name === name)) continue; // a function's later overloads
    const at = m.index!;
    let signature: string;
    let body: { signature: string; doc: string }[] = [];
    if (kind === 'class' || kind === 'interface') {
      const open = text.indexOf('{', at);
      signature = text.slice(at, open).trim();
      body = members(text.slice(open + 1, blockEnd(text, open) - 1));
    } else if (kind === 'function') {
      const sigs = [...text.matchAll(new RegExp(`^export declare function ${name.replace(/\$/g, '\\$')}\\b`, 'gm'))].map((s) => statement(text, s.index!));
      signature = sigs.join('\n');
    } else {
      signature = statement(text, at);
    }
    out.push({ name, kind, source, signature: signature.replace(/^export (declare )?/gm, ''), doc: docBefore(text, at), members: body });
  }
  return out;
}

/** Every subpath of package.json "exports" with what it exports, in the order of the entry's own file. */
export function readApi(): ApiSubpath[] {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { name: string; exports: Record<string, string | { types: string }> };
  const { dir, done } = emitDeclarations();
  try {
    return Object.entries(pkg.exports)
      .filter(([sub]) => sub !== './package.json')
      .map(([sub, target]) => {
        const types = typeof target === 'string' ? target : target.types;
        const file = types.replace(/^\.\/dist\//, '');
        const src = readFileSync(join(root, 'src', file.replace(/\.d\.ts$/, '.ts')), 'utf8');
        const about = (/^((?:\/\/.*\n)+)/.exec(src)?.[1] ?? '').replace(/^\/\/ ?/gm, '').replace(/\n(?!$)/g, ' ').trim();
        return { specifier: sub === '.' ? pkg.name : `${pkg.name}/${sub.slice(2)}`, about, entries: exportsOf(dir, file) };
      });
  } finally {
    done();
  }
}

/** The page, as docs/api.md holds it. */
export function renderApi(api: ApiSubpath[]): string {
  const lines: string[] = [
    '# API reference',
    '',
    'Every export of every subpath, with its declaration and doc comment. Generated from the code by',
    '`scripts/build-api-doc.ts` (from the `.d.ts` files tsc emits for `src/`); do not edit it by hand: run',
    '`npm run build:api-doc`. `test/api-doc.test.ts` fails when it is stale or an export has no doc comment.',
    'The guides explain how the parts work together; start at the [README](../README.md#guides).',
    '',
  ];
  for (const sub of api) lines.push(`- [\`${sub.specifier}\`](#${slug(sub.specifier)}): ${sub.entries.map((e) => `\`${e.name}\``).join(', ')}`);
  for (const sub of api) {
    lines.push('', `## ${sub.specifier}`, '', sub.about);
    for (const e of sub.entries) {
      lines.push('', `### ${sub.specifier === api[0]!.specifier ? '' : `${sub.specifier.split('/')[1]}: `}${e.name}`, '', `${e.kind}, declared in [${e.source}](../${e.source})`, '');
      lines.push('```ts', e.signature.replace(/^\s+/gm, (s) => s), '```', '');
      lines.push(e.doc || '(no doc comment)');
      if (e.members.length > 0) {
        lines.push('');
        for (const m of e.members) lines.push(`- \`${m.signature.replace(/`/g, "'")}\`${m.doc ? `: ${m.doc.replace(/\n\n/g, ' ')}` : ''}`);
      }
    }
  }
  return `${lines.join('\n')}\n`;
}

/** GitHub's anchor for a heading of plain text. */
function slug(text: string): string {
  return text.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const api = readApi();
  writeFileSync(API_DOC, renderApi(api));
  const missing = api.flatMap((s) => s.entries.filter((e) => !e.doc).map((e) => `${s.specifier}: ${e.name}`));
  console.log(`wrote ${relative(root, API_DOC)}: ${api.reduce((n, s) => n + s.entries.length, 0)} exports of ${api.length} subpaths`);
  if (missing.length > 0) console.log(`no doc comment: ${missing.join(', ')}`);
}
