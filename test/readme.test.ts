// Every TypeScript block in the README and in the guides (docs/*.md) is one of examples/*.ts,
// verbatim, and every example file is shown somewhere, so the package check's type-check of examples/
// (against the packed package) covers every code block a user may copy.
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// docs/api.md is generated from the code: its blocks are declarations, held to src/ by test/api-doc.test.ts.
const pages = ['README.md', ...readdirSync('docs').filter((f) => f.endsWith('.md') && f !== 'api.md').map((f) => `docs/${f}`)];
const text = new Map(pages.map((p) => [p, readFileSync(p, 'utf8')]));
const fences = (md: string, lang: string) => [...md.matchAll(new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\``, 'gm'))].map((m) => m[1]!.trim());
const blocks = pages.flatMap((page) => fences(text.get(page)!, 'ts').map((block) => ({ page, block })));
const examples = new Map(readdirSync('examples').filter((f) => f.endsWith('.ts')).map((f) => [f, readFileSync(`examples/${f}`, 'utf8').trim()]));

describe('code blocks of the README and docs/', () => {
  it('reads the README and at least ten guides', () => {
    expect(pages.length).toBeGreaterThanOrEqual(11);
  });

  it('has TypeScript blocks, and each one is an example file in full', () => {
    expect(blocks.length).toBeGreaterThanOrEqual(examples.size);
    for (const { page, block } of blocks) {
      const match = [...examples].find(([, t]) => t === block);
      expect(match, `${page}: block not in examples/:\n${block.slice(0, 200)}`).toBeDefined();
    }
  });

  it('shows every example file', () => {
    for (const [file, t] of examples) expect(blocks.some(({ block }) => block === t), `examples/${file} is in neither the README nor docs/`).toBe(true);
  });

  it('writes TypeScript only as ```ts (another tag would escape the checks above)', () => {
    for (const [page, md] of text) {
      const tags = [...md.matchAll(/^```(\S+)/gm)].map((m) => m[1]!);
      for (const tag of tags) expect(['ts', 'sh', 'python', 'toml', 'json', 'text'], `${page}: a block tagged ${tag}`).toContain(tag);
    }
  });

  // A Worker project of a user's own: examples/<worker>.wrangler.toml is its whole wrangler.toml, with
  // examples/<worker>.ts as its entry (the package check builds each pair with wrangler).
  const workerTomls = new Map(readdirSync('examples').filter((f) => f.endsWith('.wrangler.toml')).map((f) => [f, readFileSync(`examples/${f}`, 'utf8').trim()]));
  const tomls = pages.flatMap((page) => fences(text.get(page)!, 'toml').map((block) => ({ page, block })));

  it("every ```toml block is wrangler.toml's own text or a whole examples/*.wrangler.toml", () => {
    const wrangler = readFileSync('wrangler.toml', 'utf8');
    expect(tomls.length).toBeGreaterThan(0);
    for (const { page, block } of tomls) {
      if ([...workerTomls.values()].includes(block)) continue;
      expect(wrangler, `${page}: toml block neither in wrangler.toml nor an examples/*.wrangler.toml`).toContain(block);
    }
  });

  it('shows every examples/*.wrangler.toml, each beside its Worker, on the date wrangler.toml is tested with', () => {
    expect(workerTomls.size).toBeGreaterThan(0);
    const date = /^compatibility_date = "([\d-]+)"$/m.exec(readFileSync('wrangler.toml', 'utf8'))?.[1];
    expect(date).toBeDefined();
    for (const [file, toml] of workerTomls) {
      expect(tomls.some(({ block }) => block === toml), `examples/${file} is in neither the README nor docs/`).toBe(true);
      expect(examples.has(file.replace(/\.wrangler\.toml$/, '.ts')), `examples/${file} has no Worker beside it`).toBe(true);
      expect(toml, `examples/${file}`).toMatch(/^main = "src\/index\.ts"$/m);
      expect(toml, `examples/${file}`).toContain(`compatibility_date = "${date}"`);
    }
  });

  it("names the tarball npm pack writes for this version", () => {
    const { name, version } = JSON.parse(readFileSync('package.json', 'utf8')) as { name: string; version: string };
    const named = [...text.get('README.md')!.matchAll(/edge-limiter-\d[\w.-]*?\.tgz/g)].map((m) => m[0]); // 0.3.0-dev too
    expect(named.length).toBeGreaterThan(0);
    for (const n of named) expect(n).toBe(`${name}-${version}.tgz`);
  });
});

describe('what the README says of settle() and the settle right', () => {
  const readme = text.get('README.md')!.replace(/\s+/g, ' ');
  it('names what settle() does when its settlement fails, and its timeoutMs default as src/settle.ts has it', () => {
    for (const said of ['still returns the work\'s result', '`onSettleError`', 'one `console.warn` line', 'does not retry on its own', '`retry()`']) expect(readme).toContain(said);
    const ms = Number(/timeoutMs \?\? ([\d_]+)/.exec(readFileSync('src/settle.ts', 'utf8'))![1]!.replace(/_/g, ''));
    expect(readme).toContain(`Its \`timeoutMs\` (${ms / 1000} s by default) bounds the wait for the permit`);
  });

  it('its Security section says a permit and settle token can admit without bound by settling at cost 0', () => {
    const security = /## Security(.*?)## /.exec(readme)![1]!;
    expect(security).toMatch(/both `permit` and `settle` can admit any number of requests by settling each take at cost 0/);
    expect(security).toContain('at most the capacity is in flight');
  });

  it("docs/several-limits.md's Settlement section describes the bounded form first, and free-form adjust as the admin path", () => {
    const section = /## Settlement\n([\s\S]*?)\n## /.exec(text.get('docs/several-limits.md')!)![1]!.replace(/\s+/g, ' ');
    expect(section).toContain('limiter.settle(policy, key, { charge, cost })');
    expect(section).toContain('PermitClient.settle');
    expect(section).toMatch(/Free-form.*the administrative path/);
  });
});
