// One shared redis-server for the whole run, on a free port, without persistence. `npm test` has made
// sure it is installed (scripts/test-tools.ts); a run of vitest alone without it stops with the same line.
import type { TestProject } from 'vitest/node';
import { startRedis } from '../../scripts/lib/redis-server.js';
import { installLine, TOOLS, which } from '../../scripts/lib/tools.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const missing = TOOLS.filter((t) => t.bin === 'redis-server' && !which(t.bin, process.env.PATH));
  if (missing.length > 0) throw new Error(installLine(missing));
  const redis = await startRedis();
  project.provide('redisUrl', redis.url);
  return async () => {
    await redis.stop();
  };
}
