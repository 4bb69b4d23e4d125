// Each entry bundles without a database driver it does not need: the root, the Redis store and the Hono
// entry never pull in `mongodb`; only the mongodb subpath refers to a Mongo collection, and even it does
// not import the driver (the caller passes a Collection).
import { describe, expect, it } from 'vitest';
import { build } from 'esbuild';
import { readFileSync } from 'node:fs';

async function inputsOf(entry: string): Promise<string[]> {
  const result = await build({ entryPoints: [entry], bundle: true, write: false, metafile: true, platform: 'neutral', format: 'esm', logLevel: 'silent', mainFields: ['module', 'main'] });
  return Object.keys(result.metafile!.inputs);
}

describe('package entries', () => {
  for (const entry of ['src/index.ts', 'src/stores/redis.ts', 'src/stores/mongodb.ts', 'src/stores/memory.ts', 'src/hono.ts', 'src/client/permit-client.ts']) {
    it(`${entry} bundles with no MongoDB driver, TCP Redis client or Redis SDK`, async () => {
      const inputs = await inputsOf(entry);
      expect(inputs.some((i) => i.startsWith('src/'))).toBe(true);
      for (const pkg of ['node_modules/mongodb/', 'node_modules/bson/', 'node_modules/ioredis/', 'node_modules/@redis/', 'node_modules/@upstash/redis/']) {
        expect(inputs.filter((i) => i.includes(pkg)), pkg).toEqual([]);
      }
    });
  }

  it('every export in package.json points at a built file of a source that exists', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { exports: Record<string, { import?: string; types?: string } | string> };
    for (const [sub, target] of Object.entries(pkg.exports)) {
      if (typeof target === 'string') continue;
      const src = target.import!.replace('./dist/', 'src/').replace(/\.js$/, '.ts');
      expect(() => readFileSync(src), `${sub} -> ${src}`).not.toThrow();
      expect(target.types).toBe(target.import!.replace(/\.js$/, '.d.ts'));
    }
  });
});
