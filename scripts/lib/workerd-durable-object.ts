// Runs the Durable Object store inside workerd (Miniflare): bundles the test Worker with esbuild, binds
// RateLimiterObject, and returns a Store whose calls go over HTTP to that Worker, which makes them with
// durableObjectStore against the real Durable Object.
import { build } from 'esbuild';
import { convertV4MiniflareOptions, Miniflare } from 'miniflare';
import { fileURLToPath } from 'node:url';
import type { Store } from '../../src/store.js';

export interface WorkerdDurableObjects {
  /** A Store in Node whose every call runs durableObjectStore inside workerd. */
  store(options?: { shards?: number }): Store;
  url: string;
  dispose(): Promise<void>;
}

export async function startDurableObjects(options: { persistDir?: string } = {}): Promise<WorkerdDurableObjects> {
  const entry = fileURLToPath(new URL('../../test/fixtures/durable-object/worker.ts', import.meta.url));
  const bundle = await build({ entryPoints: [entry], bundle: true, format: 'esm', platform: 'neutral', write: false, target: 'es2022' });
  // miniflare 5 takes a new options shape; the v4 shape, converted by its own helper, is shorter here.
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      modules: true,
      script: bundle.outputFiles[0]!.text,
      compatibilityDate: '2026-10-20',
      durableObjects: { LIMITER_DO: { className: 'RateLimiterObject', useSQLite: true } },
      ...(options.persistDir ? { resourcePersistencePath: options.persistDir } : {}),
    }),
  );
  const url = (await mf.ready).toString().replace(/\/$/, '');
  const call = async (path: string, body: unknown, signal?: AbortSignal) => {
    const res = await fetch(`${url}${path}`, { method: 'POST', body: JSON.stringify(body), ...(signal ? { signal } : {}) });
    const text = await res.text();
    if (!res.ok) throw new Error(`durable object worker ${res.status}: ${text}`);
    return JSON.parse(text);
  };
  return {
    url,
    store({ shards } = {}) {
      const q = shards ? `?shards=${shards}` : '';
      return {
        name: 'durable-object',
        step: (key, args, o) => call(`/step${q}`, { key, args }, o?.signal),
        reset: async (key) => void (await call(`/reset${q}`, { key })),
        override: (key, args, o) => call(`/override${q}`, { key, args }, o?.signal),
        ping: async () => void (await call(`/ping${q}`, {})),
      };
    },
    dispose: () => mf.dispose(),
  };
}
