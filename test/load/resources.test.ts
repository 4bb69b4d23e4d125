// Bounded resources: the memory store under a million keys, TTLs on every Redis key, and a soak with
// flat heap and handle counts. SOAK_SECONDS sets the soak length (default 60).
import { describe, expect, it, inject } from 'vitest';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Redis as IORedis } from 'ioredis';
import { createLimiter } from '../../src/index.js';
import { redisStore } from '../../src/stores/redis.js';

const run = promisify(execFile);
const child = (name: string, env: Record<string, string> = {}) =>
  run(process.execPath, ['--expose-gc', '--import', 'tsx', fileURLToPath(new URL(`../support/${name}`, import.meta.url))], {
    env: { ...process.env, ...env },
    maxBuffer: 16 * 2 ** 20,
  }).then(({ stdout }) => JSON.parse(stdout.trim().split('\n').pop()!));

/** The stated ceiling for 100,000 buckets (the default maxKeys) on the heap. */
const MEMORY_CEILING_MB = 48;

describe('bounded resources', () => {
  it(`memory store: 1,000,000 distinct keys stay under maxKeys and ${MEMORY_CEILING_MB} MB of heap`, { timeout: 120_000 }, async () => {
    const r = await child('memory-bound-child.ts');
    console.log(`[resources] memory store ${JSON.stringify(r)}`);
    expect(r.maxSize).toBeLessThanOrEqual(100_000);
    expect(r.heapGrowthMB).toBeLessThan(MEMORY_CEILING_MB);
  });

  it('every Redis key written has a TTL after a mixed run', async () => {
    const client = new IORedis(inject('redisUrl'));
    const prefix = `ttl${Date.now()}:`;
    try {
      const limiter = createLimiter({ store: redisStore({ client }), prefix, policies: { a: { capacity: 3, refillPerSecond: 10 }, b: { capacity: 1e6, refillPerSecond: 1e-3 } } });
      for (let i = 0; i < 300; i++) {
        const key = `k${i % 37}`;
        await limiter.take('a', key, { cost: 1 + (i % 3), maxWaitMs: i % 5 === 0 ? 500 : 0 });
        await limiter.take('b', key, { cost: 1 + (i % 7) });
        if (i % 11 === 0) await limiter.peek('a', key);
        if (i % 13 === 0) await limiter.reset('b', key);
      }
      let cursor = '0';
      let keys = 0;
      const withoutTtl: string[] = [];
      do {
        const [next, batch] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
        cursor = next;
        for (const k of batch) {
          keys++;
          if ((await client.pttl(k)) < 0) withoutTtl.push(k);
        }
      } while (cursor !== '0');
      console.log(`[resources] redis keys after the mixed run: ${keys}, without TTL: ${withoutTtl.length}`);
      expect(keys).toBeGreaterThan(30);
      expect(withoutTtl).toEqual([]);
    } finally {
      client.disconnect();
    }
  });

  const soakSeconds = Number(process.env.SOAK_SECONDS ?? 60);
  it(`soak: ${soakSeconds} s of mixed traffic with timeouts keeps heap and handles flat`, { timeout: (soakSeconds + 60) * 1000 }, async () => {
    const r = (await child('soak-child.ts', { SOAK_SECONDS: String(soakSeconds) })) as {
      decisions: number;
      samples: { heapMB: number; handles: number }[];
      after: { heapMB: number; handles: number; pending: number };
    };
    const third = Math.max(1, Math.floor(r.samples.length / 3));
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const early = r.samples.slice(0, third);
    const late = r.samples.slice(-third);
    const heapEarly = median(early.map((s) => s.heapMB));
    const heapLate = median(late.map((s) => s.heapMB));
    const handlesEarly = Math.max(...early.map((s) => s.handles));
    const handlesLate = Math.max(...late.map((s) => s.handles));
    console.log(
      `[resources] soak ${soakSeconds} s: ${r.decisions} decisions; heap median ${heapEarly.toFixed(1)} -> ${heapLate.toFixed(1)} MB; handles max ${handlesEarly} -> ${handlesLate}; after: ${JSON.stringify(r.after)}`,
    );
    expect(r.decisions).toBeGreaterThan(soakSeconds * 1000);
    expect(heapLate).toBeLessThan(heapEarly + 5);
    expect(handlesLate).toBeLessThanOrEqual(handlesEarly + 10);
    // Once traffic stops, every timer and pending store call is gone.
    expect(r.after.pending).toBe(0);
    expect(r.after.handles).toBeLessThanOrEqual(2);
  });
});
