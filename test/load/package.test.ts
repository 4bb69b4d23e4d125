// The package as users get it: `npm run check:package` packs it (from a clean dist/: a stale file left
// there is not shipped), installs the tarball into a fresh consumer project, type-checks examples/ and
// every subpath there, imports them at run time, and runs publint and arethetypeswrong.
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

it('the packed tarball installs, type-checks, imports and lints clean', { timeout: 120_000 }, async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['scripts/check-package.mjs'], { cwd: root });
  console.log(stdout.trim());
  // Every example file and every export (less ./package.json), counted from the checkout.
  const examples = readdirSync(`${root}/examples`).filter((f) => f.endsWith('.ts')).length;
  const subpaths = Object.keys(JSON.parse(readFileSync(`${root}/package.json`, 'utf8')).exports).filter((s) => s !== './package.json').length;
  expect(examples).toBeGreaterThanOrEqual(12);
  expect(subpaths).toBeGreaterThanOrEqual(7);
  expect(stdout).toMatch(/packed from a clean dist\/: its \d+ files are all built from src\/ \(dist\/stale-module-from-an-old-build\.js, left there before packing, is not shipped\)/);
  expect(stdout).toContain(`type-checked ${examples} examples and ${subpaths} subpaths`);
  // Every guide ships (docs/*.md), so the README's links to them work in the package.
  const guides = readdirSync(`${root}/docs`).filter((f) => f.endsWith('.md')).length;
  expect(guides).toBeGreaterThanOrEqual(10);
  expect(stdout).toMatch(new RegExp(`the packed README and ${guides} guides: their \\d+ links to guides reach files in the tarball`));
  const workers = readdirSync(`${root}/examples`).filter((f) => f.endsWith('.wrangler.toml')).length;
  expect(workers).toBeGreaterThanOrEqual(2);
  expect(stdout).toContain(`built ${workers} Worker projects (examples/*.wrangler.toml) with wrangler against the package`);
  expect(stdout).toMatch(/decided 200 then 429 through the installed package/);
  expect(stdout).toMatch(/publint --strict: no issues/);
  expect(stdout).toMatch(/arethetypeswrong \(esm-only profile\): no problems/);
  expect(stdout.trim().split('\n').at(-1)).toBe('[check:package] ok');
});
