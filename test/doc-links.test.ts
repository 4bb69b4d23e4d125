// Every link in the README, the guides, SECURITY.md, CHANGELOG.md and the Python client's README
// reaches something: a relative link names a file or folder that exists, and a `#anchor` is made by a
// heading of the page it points into, by GitHub's rules for heading anchors.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const pages = ['README.md', 'SECURITY.md', 'CHANGELOG.md', 'clients/python/README.md', ...readdirSync('docs').filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

/** The text outside fenced code blocks and inline code spans. */
function prose(md: string): string {
  return md.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
}

/**
 * The anchor GitHub gives a heading: its text as rendered (no code ticks, emphasis or link targets),
 * lower-cased, with every character but letters, marks, digits, connectors, spaces and hyphens
 * removed, and spaces made hyphens; a repeated anchor gets -1, -2, ...
 */
export function anchors(md: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  for (const m of md.replace(/^```[\s\S]*?^```/gm, '').matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const text = m[1]!
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
      .replace(/[`*]|<[^>]+>/g, '');
    const base = text.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Each inline link or image target of a page: `[text](target)` and `![alt](target "title")`. */
export function links(md: string): string[] {
  return [...prose(md).matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1]!);
}

/** What is wrong with each link of `page` (empty when every link reaches something). */
export function brokenLinks(page: string, read = (p: string) => readFileSync(p, 'utf8'), exists: (p: string) => boolean = existsSync): string[] {
  const broken: string[] = [];
  for (const target of links(read(page))) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: and the like
    const [path, anchor] = target.split('#', 2) as [string, string | undefined];
    const file = path === '' ? page : normalize(join(dirname(page), decodeURIComponent(path)));
    if (!exists(file)) {
      broken.push(`${target}: no such file ${file}`);
      continue;
    }
    if (anchor === undefined) continue;
    if (!file.endsWith('.md') || (existsSync(file) && statSync(file).isDirectory())) {
      broken.push(`${target}: an anchor into ${file}, which has no headings`);
      continue;
    }
    if (!anchors(read(file)).has(decodeURIComponent(anchor))) broken.push(`${target}: no heading of ${file} makes #${anchor}`);
  }
  return broken;
}

describe('links in the docs', () => {
  it('finds the links of the README and the guides', () => {
    expect(links(readFileSync('README.md', 'utf8')).length).toBeGreaterThanOrEqual(20);
    expect(pages.filter((p) => p.startsWith('docs/')).flatMap((p) => links(readFileSync(p, 'utf8'))).length).toBeGreaterThanOrEqual(40);
  });

  for (const page of pages) {
    it(`${page}: every relative link and anchor reaches something`, () => {
      expect(brokenLinks(page)).toEqual([]);
    });
  }

  it('makes anchors as GitHub does', () => {
    const md = '# The local fallback (`onStoreError: \'local\'`)\n## 1. Edge request gating (Hono middleware)\n### `TIME` inside scripts\n## Node 20 and 22\n## Node 20 and 22\n```sh\n# not a heading\n```\n';
    expect([...anchors(md)]).toEqual(['the-local-fallback-onstoreerror-local', '1-edge-request-gating-hono-middleware', 'time-inside-scripts', 'node-20-and-22', 'node-20-and-22-1']);
  });

  it('reports a missing file, a missing anchor, and an anchor into a page that lacks it', () => {
    const files: Record<string, string> = {
      'docs/a.md': '# A\n## Some part\nSee [b](b.md), [gone](gone.md), [part](#some-part), [nope](#nope), [b part](b.md#other), [code](`x`).\n',
      'docs/b.md': '# B\n## Part\n',
    };
    const broken = brokenLinks('docs/a.md', (p) => files[p]!, (p) => p in files).map((b) => b.split(':')[0]);
    expect(broken).toEqual(['gone.md', '#nope', 'b.md#other']);
  });
});
