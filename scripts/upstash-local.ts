// `npm run upstash:local`: the local Upstash-compatible REST server in front of REDIS_URL.
// Environment: REDIS_URL (default redis://127.0.0.1:6379), UPSTASH_LOCAL_TOKEN (default local-token),
// PORT (default 8079). Point @upstash/redis (or the Worker's UPSTASH_REDIS_REST_URL) at the printed URL.
import { startUpstashLocal } from './upstash-local/server.js';

const server = await startUpstashLocal({
  redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  token: process.env.UPSTASH_LOCAL_TOKEN ?? 'local-token',
  port: Number(process.env.PORT ?? 8079),
});
console.log(`Upstash-compatible REST server on ${server.url} (token: ${server.token}) -> ${process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'}`);
console.log(`  UPSTASH_REDIS_REST_URL=${server.url} UPSTASH_REDIS_REST_TOKEN=${server.token}`);
const stop = async () => {
  await server.close();
  process.exit(0);
};
process.on('SIGINT', () => void stop());
process.on('SIGTERM', () => void stop());
