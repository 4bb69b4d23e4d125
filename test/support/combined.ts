// Drives several permit servers at once on one bucket and reports admitted vs the ideal bracket.
import type { PermitClient } from '../../src/client/permit-client.js';

export async function combinedRun(clients: PermitClient[], opts: { policy: string; key: string; callers: number; durationMs: number; capacity: number; refillPerSecond: number }) {
  const now = () => performance.now();
  const deadline = now() + opts.durationMs;
  let admitted = 0;
  let firstStart = Infinity;
  let firstEnd = Infinity;
  let lastStart = 0;
  let lastEnd = 0;
  const perClient = clients.map(() => 0);
  await Promise.all(
    Array.from({ length: opts.callers }, async (_, i) => {
      const c = i % clients.length;
      while (now() < deadline) {
        const s = now();
        const d = await clients[c]!.take(opts.policy, opts.key);
        const e = now();
        firstStart = Math.min(firstStart, s);
        firstEnd = Math.min(firstEnd, e);
        lastStart = Math.max(lastStart, s);
        lastEnd = Math.max(lastEnd, e);
        if (d.allowed) {
          admitted++;
          perClient[c]!++;
        }
      }
    }),
  );
  return {
    admitted,
    perClient,
    idealMax: opts.capacity + (opts.refillPerSecond * (lastEnd - firstStart)) / 1000,
    idealMin: opts.capacity + (opts.refillPerSecond * (lastStart - firstEnd)) / 1000,
  };
}
