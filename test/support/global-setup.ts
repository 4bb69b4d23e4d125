// One shared redis-server for the whole run, on a free port, without persistence.
import type { TestProject } from 'vitest/node';
import { startRedis } from '../../scripts/lib/redis-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const redis = await startRedis();
  project.provide('redisUrl', redis.url);
  return async () => {
    await redis.stop();
  };
}
