// Every TypeScript block in the README is one of examples/*.ts, verbatim, so the package check's
// type-check of examples/ (against the packed package) covers every code block a user may copy.
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const readme = readFileSync('README.md', 'utf8');
const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!.trim());
const examples = new Map(readdirSync('examples').filter((f) => f.endsWith('.ts')).map((f) => [f, readFileSync(`examples/${f}`, 'utf8').trim()]));

describe('README code blocks', () => {
  it('has TypeScript blocks, and each one is an example file in full', () => {
    expect(blocks.length).toBeGreaterThanOrEqual(examples.size);
    for (const block of blocks) {
      const match = [...examples].find(([, text]) => text === block);
      expect(match, `README block not in examples/:\n${block.slice(0, 200)}`).toBeDefined();
    }
  });

  it('shows every example file', () => {
    for (const [file, text] of examples) expect(blocks.includes(text), `examples/${file} is not in the README`).toBe(true);
  });
});
