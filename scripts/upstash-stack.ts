// The local stack behind `npm run dev -- --upstash`: a real redis-server (or REDIS_URL when set) and the
// Upstash-compatible REST server in front of it. Prints one JSON line {url, token, redisUrl}, then runs
// until it is sent SIGTERM.
import { startUpstashLocal } from './upstash-local/server.js';
import { startRedis } from './lib/redis-server.js';

const redis = process.env.REDIS_URL ? undefined : await startRedis();
const redisUrl = process.env.REDIS_URL ?? redis!.url;
const server = await startUpstashLocal({ redisUrl, token: process.env.UPSTASH_LOCAL_TOKEN ?? 'local-token' });
console.log(JSON.stringify({ url: server.url, token: server.token, redisUrl }));
const stop = async () => {
  await server.close();
  await redis?.stop();
  process.exit(0);
};
process.on('SIGINT', () => void stop());
process.on('SIGTERM', () => void stop());
