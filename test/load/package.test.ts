// The package as users get it: `npm run check:package` packs it, installs the tarball into a fresh
// consumer project, type-checks examples/ and every subpath there, imports them at run time, and runs
// publint and arethetypeswrong.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

it('the packed tarball installs, type-checks, imports and lints clean', { timeout: 120_000 }, async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['scripts/check-package.mjs'], { cwd: root });
  console.log(stdout.trim());
  expect(stdout).toMatch(/type-checked 10 examples and 6 subpaths/);
  expect(stdout).toMatch(/decided 200 then 429 through the installed package/);
  expect(stdout).toMatch(/publint --strict: no issues/);
  expect(stdout).toMatch(/arethetypeswrong \(esm-only profile\): no problems/);
  expect(stdout.trim().split('\n').at(-1)).toBe('[check:package] ok');
});
