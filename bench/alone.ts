// One section of `npm run bench` run on its own (`npm run bench:multi-limit`, `npm run bench:overrides`):
// its own redis-server and connection, the section's rows printed, and written to bench/RESULTS.<name>.md
// unless in quick mode (`-- --quick`: small samples, for checking the harness).
import { writeFileSync } from 'node:fs';
import { Redis as IORedis } from 'ioredis';
import { startRedis } from '../scripts/lib/redis-server.js';

/** What a section of bench/run.ts takes. */
export interface SectionOptions {
  io: IORedis;
  quick: boolean;
  runs: number;
  log: (...a: unknown[]) => void;
}

export async function runAlone(o: { title: string; script: string; section: number; results: string; run: (options: SectionOptions) => Promise<string[]> }): Promise<void> {
  const quick = process.argv.includes('--quick');
  const started = new Date();
  const redis = await startRedis();
  const io = new IORedis(redis.url);
  const version = ((await io.info('server')).match(/redis_version:(\S+)/) ?? [])[1];
  const md = await o.run({ io, quick, runs: quick ? 3 : 9, log: (...a) => console.error('[bench]', ...a) });
  io.disconnect();
  await redis.stop();
  const out = [
    o.title,
    '',
    `Written by \`npm run ${o.script}${quick ? ' -- --quick' : ''}\` on ${started.toISOString()}; Node ${process.version}; redis-server ${version}. The same code is section ${o.section} of \`npm run bench\`.`,
    '',
    ...md,
  ].join('\n');
  if (!quick) writeFileSync(new URL(`./${o.results}`, import.meta.url), `${out}\n`);
  console.log(out);
}
