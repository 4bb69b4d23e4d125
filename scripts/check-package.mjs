// `npm run check:package`: proves the package installs and works as published. Packs the tarball
// (prepack builds dist/ from empty: a stale file planted in dist/ first must not ship), installs it
// into a temporary consumer project, type-checks examples/ and an import of every subpath there
// against the published .d.ts, builds each Worker project of examples/*.wrangler.toml with wrangler,
// imports every subpath at run time (ESM, and require() of the ESM build), then runs publint and
// arethetypeswrong on it.
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';

const root = join(import.meta.dirname, '..');
const work = mkdtempSync(join(tmpdir(), 'edge-limiter-consumer-'));
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const bin = (name) => join(root, 'node_modules/.bin', name);
const run = (cmd, args, cwd, env = {}) => execFileSync(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', env: { ...process.env, npm_config_update_notifier: 'false', ...env } });
const step = (msg) => console.log(`[check:package] ${msg}`);
// A file an earlier build left in dist/ (its module since deleted from src/): prepack must not ship it.
const STALE = 'dist/stale-module-from-an-old-build.js';

try {
  mkdirSync(join(root, 'dist'), { recursive: true });
  writeFileSync(join(root, STALE), 'export const stale = true;\n');
  run('npm', ['pack', '--pack-destination', work, '--silent'], root);
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
  step(`packed ${tarball}`);
  const files = run('tar', ['-tzf', join(work, tarball)]).trim().split('\n');
  for (const forbidden of [/^package\/src\//, /^package\/functions\//, /^package\/scripts\//, /^package\/test\//, /upstash-local/]) {
    const hit = files.find((f) => forbidden.test(f));
    if (hit) throw new Error(`the tarball ships ${hit}: only the library belongs in it`);
  }
  // Every file under dist/ in the tarball is built from a module src/ has now.
  const modules = new Set(readdirSync(join(root, 'src'), { recursive: true }).filter((f) => f.endsWith('.ts')).map((f) => f.replace(/\.ts$/, '')));
  const built = files.filter((f) => f.startsWith('package/dist/'));
  const orphans = built.filter((f) => !modules.has(f.slice('package/dist/'.length).replace(/\.d\.ts$|\.js$/, '')));
  if (built.length === 0 || orphans.length > 0) {
    throw new Error(`the tarball ships ${orphans.join(', ') || 'no dist/'}: no module in src/ builds it (prepack must build from a clean dist/)`);
  }
  step(`packed from a clean dist/: its ${built.length} files are all built from src/ (${STALE}, left there before packing, is not shipped)`);

  // The README's guide links work in the package too: the guides ship, and every link of a shipped page
  // (the README or a guide) into docs/ reaches a file in the tarball. (Links into the repository's
  // examples/, bench/ and the like stay links to the repository.)
  const shipped = new Set(files.map((f) => f.slice('package/'.length)));
  const pages = [...shipped].filter((f) => f === 'README.md' || /^docs\/[^/]+\.md$/.test(f));
  const extract = join(work, 'extract');
  mkdirSync(extract);
  run('tar', ['-xzf', join(work, tarball), '-C', extract]);
  let docLinks = 0;
  for (const page of pages) {
    const md = readFileSync(join(extract, 'package', page), 'utf8').replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
    for (const [, target] of md.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>#]*)[^)]*\)/g)) {
      if (!target || /^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
      const file = posix.normalize(posix.join(posix.dirname(page), decodeURIComponent(target)));
      if (!file.startsWith('docs/') || !file.endsWith('.md')) continue;
      docLinks++;
      if (!shipped.has(file)) throw new Error(`${page} links ${target}, which the tarball does not hold (${file})`);
    }
  }
  if (docLinks === 0) throw new Error('the packed README links no guide in docs/');
  step(`the packed README and ${pages.length - 1} guides: their ${docLinks} links to guides reach files in the tarball`);

  const consumer = join(work, 'consumer');
  mkdirSync(consumer);
  writeFileSync(join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module', dependencies: { 'edge-limiter': `file:../${tarball}` } }, null, 2));
  run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--ignore-scripts'], consumer);
  step(`installed into ${consumer}`);
  // The optional peers and type packages a user would install next to it: taken from this checkout.
  for (const dep of ['hono', '@hono/node-server', '@upstash/redis', 'ioredis', 'redis', 'mongodb', '@types/node', 'typescript']) {
    const target = join(consumer, 'node_modules', dep);
    mkdirSync(join(target, '..'), { recursive: true });
    symlinkSync(join(root, 'node_modules', dep), target, 'dir');
  }

  cpSync(join(root, 'examples'), join(consumer, 'examples'), { recursive: true });
  const subpaths = Object.keys(pkg.exports).filter((s) => s !== './package.json').map((s) => (s === '.' ? pkg.name : `${pkg.name}/${s.slice(2)}`));
  writeFileSync(
    join(consumer, 'imports.ts'),
    subpaths.map((s, i) => `import * as m${i} from '${s}';`).join('\n') + `\nexport const modules = [${subpaths.map((_, i) => `m${i}`).join(', ')}];\n`,
  );
  writeFileSync(
    join(consumer, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2024', 'DOM', 'DOM.Iterable'], types: ['node'], strict: true, noEmit: true, skipLibCheck: true },
      include: ['examples', 'imports.ts'],
    }),
  );
  run(bin('tsc'), ['-p', join(consumer, 'tsconfig.json')], consumer);
  step(`type-checked ${readdirSync(join(consumer, 'examples')).filter((f) => f.endsWith('.ts')).length} examples and ${subpaths.length} subpaths against the published types`);

  // Each examples/<worker>.wrangler.toml is the whole wrangler.toml of a Worker project of a user's own
  // (docs/deploying.md): built as one, with examples/<worker>.ts as its src/index.ts, by wrangler
  // against the installed package. wrangler checks the bindings too: a Durable Object class the
  // entry does not export fails the build.
  symlinkSync(join(root, 'node_modules', 'wrangler'), join(consumer, 'node_modules', 'wrangler'), 'dir');
  const workerTomls = readdirSync(join(root, 'examples')).filter((f) => f.endsWith('.wrangler.toml'));
  if (workerTomls.length === 0) throw new Error('examples/ holds no <worker>.wrangler.toml');
  for (const toml of workerTomls) {
    const project = join(work, toml.replace(/\.wrangler\.toml$/, ''));
    mkdirSync(join(project, 'src'), { recursive: true });
    cpSync(join(root, 'examples', toml), join(project, 'wrangler.toml'));
    cpSync(join(root, 'examples', toml.replace(/\.wrangler\.toml$/, '.ts')), join(project, 'src/index.ts'));
    symlinkSync(join(consumer, 'node_modules'), join(project, 'node_modules'), 'dir');
    run(process.execPath, [join(consumer, 'node_modules/wrangler/bin/wrangler.js'), 'deploy', '--dry-run', '--outdir', 'out'], project, { WRANGLER_SEND_METRICS: 'false', CI: '1' });
  }
  step(`built ${workerTomls.length} Worker projects (examples/*.wrangler.toml) with wrangler against the package`);

  writeFileSync(
    join(consumer, 'run.mjs'),
    `import { createRequire } from 'node:module';
const expected = ${JSON.stringify({
      [pkg.name]: ['createLimiter', 'memoryStore', 'ConfigError', 'StoreError', 'AcquireTimeoutError', 'InvalidInputError'],
      [`${pkg.name}/memory`]: ['memoryStore'],
      [`${pkg.name}/redis`]: ['redisStore'],
      [`${pkg.name}/mongodb`]: ['mongoStore', 'stepPipeline'],
      [`${pkg.name}/hono`]: ['rateLimit', 'ipKey', 'headerKey', 'clientIp', 'permitApp', 'rateLimitHeaders', 'createForwarder'],
      [`${pkg.name}/client`]: ['PermitClient', 'PermitError', 'AcquireTimeoutError', 'limitedFetch'],
    })};
for (const [spec, names] of Object.entries(expected)) {
  const m = await import(spec);
  for (const n of names) if (typeof m[n] !== 'function') throw new Error(spec + ' lacks ' + n);
}
const { createLimiter, memoryStore } = await import('${pkg.name}');
const { permitApp } = await import('${pkg.name}/hono');
const limiter = createLimiter({ store: memoryStore(), policies: { p: { capacity: 1, refillPerSecond: 1 } } });
const app = permitApp({ limiter, tokens: ['t'], log: () => {} });
const post = () => app.request('/v1/permits', { method: 'POST', headers: { Authorization: 'Bearer t', 'Content-Type': 'application/json' }, body: '{"policy":"p","key":"k"}' });
const statuses = [(await post()).status, (await post()).status];
if (statuses.join() !== '200,429') throw new Error('decisions ' + statuses);
// CommonJS: no require condition; Node's require() of an ES module loads it (Node >= 20.19 / 22.12).
const cjs = createRequire(import.meta.url)('${pkg.name}');
if (typeof cjs.createLimiter !== 'function') throw new Error('require() did not load the ESM build');
console.log('ok');
`,
  );
  const out = run(process.execPath, ['run.mjs'], consumer).trim();
  if (out !== 'ok') throw new Error(`run.mjs printed ${out}`);
  step(`imported all ${subpaths.length} subpaths at run time (import and require), and decided 200 then 429 through the installed package`);

  run(bin('publint'), ['--strict'], root);
  step('publint --strict: no issues');
  run(bin('attw'), [join(work, tarball), '--profile', 'esm-only', '--format', 'ascii'], root);
  step('arethetypeswrong (esm-only profile): no problems');
  console.log('[check:package] ok');
} catch (err) {
  console.error(`[check:package] FAILED: ${err.message}`);
  if (err.stdout) console.error(err.stdout);
  if (err.stderr) console.error(err.stderr);
  process.exitCode = 1;
} finally {
  rmSync(work, { recursive: true, force: true });
}
