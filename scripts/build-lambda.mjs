// `npm run build:lambda`: one minified ESM bundle per store kind (functions/lambda/<kind>.ts), each
// zipped as a deployable Lambda package with handler `index.handler`. Writes build/lambda/ and prints
// the sizes; `--kinds redis,mongodb` builds only those.
import { build } from 'esbuild';
import { createWriteStream, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import yazl from 'yazl';

const root = join(import.meta.dirname, '..');
const out = join(root, 'build/lambda');
const all = ['memory', 'redis', 'upstash', 'mongodb'];
const arg = process.argv.indexOf('--kinds');
const kinds = arg > 0 ? process.argv[arg + 1].split(',') : all;
for (const k of kinds) if (!all.includes(k)) throw new Error(`unknown store kind ${k}; one of ${all.join(', ')}`);

function zip(file, zipPath) {
  return new Promise((resolve, reject) => {
    const z = new yazl.ZipFile();
    // A fixed mtime keeps the zip byte-identical across builds of the same bundle.
    z.addBuffer(readFileSync(file), 'index.mjs', { mtime: new Date('2026-01-01T00:00:00Z'), mode: 0o100644 });
    z.end();
    z.outputStream.pipe(createWriteStream(zipPath)).on('close', resolve).on('error', reject);
  });
}

const sizes = {};
for (const kind of kinds) {
  const dir = join(out, kind);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const outfile = join(dir, 'index.mjs');
  await build({
    entryPoints: [join(root, `functions/lambda/${kind}.ts`)],
    bundle: true,
    minify: true,
    platform: 'node',
    format: 'esm',
    target: 'node22',
    outfile,
    legalComments: 'none',
    logLevel: 'warning',
    // Some dependencies call require(); an ESM bundle needs one.
    banner: { js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);" },
  });
  const zipPath = join(out, `edge-limiter-lambda-${kind}.zip`);
  await zip(outfile, zipPath);
  sizes[kind] = { bundleBytes: statSync(outfile).size, zipBytes: statSync(zipPath).size };
}
writeFileSync(join(out, 'sizes.json'), JSON.stringify(sizes, null, 2) + '\n');
const kb = (n) => `${(n / 1024).toFixed(1)} KiB`;
console.log('store     bundle       zip');
for (const [k, s] of Object.entries(sizes)) console.log(`${k.padEnd(9)} ${kb(s.bundleBytes).padStart(11)} ${kb(s.zipBytes).padStart(11)}  build/lambda/edge-limiter-lambda-${k}.zip`);
