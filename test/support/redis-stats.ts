// Reads INFO commandstats, to count at Redis what the store sent.
import type { Redis as IORedis } from 'ioredis';

/** Per-command call counts from INFO commandstats (calls + failed + rejected). */
export async function commandStats(client: IORedis): Promise<Record<string, { calls: number; failed: number; rejected: number }>> {
  const info = await client.info('commandstats');
  const out: Record<string, { calls: number; failed: number; rejected: number }> = {};
  for (const line of info.split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+),.*?rejected_calls=(\d+),failed_calls=(\d+)/.exec(line.trim());
    if (m) out[m[1]!] = { calls: Number(m[2]), rejected: Number(m[3]), failed: Number(m[4]) };
  }
  return out;
}

/**
 * Script calls (EVALSHA + EVAL) and their Redis time in µs since the last RESETSTAT. A script's usec
 * already includes the commands it runs, which commandstats also lists on their own, so summing every
 * command would count them twice.
 */
export async function scriptStats(client: IORedis): Promise<{ calls: number; usec: number }> {
  const info = await client.info('commandstats');
  let calls = 0;
  let usec = 0;
  for (const m of info.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+),usec=(\d+)/gm)) {
    calls += Number(m[1]);
    usec += Number(m[2]);
  }
  return { calls, usec };
}
