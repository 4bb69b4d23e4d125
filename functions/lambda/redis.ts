// AWS Lambda entry with only the redis store: what `npm run build:lambda` bundles as lambda-redis.zip.
import { lambdaHandler } from '../app/lambda-handler.js';
import { redisNodeStore } from '../app/node-stores/redis.js';
import type { AppConfig } from '../app/env.js';

export const handler = lambdaHandler((config, options) => redisNodeStore(config as Extract<AppConfig['store'], { kind: 'redis' }>, options), ['redis']);
