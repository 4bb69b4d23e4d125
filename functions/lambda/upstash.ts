// AWS Lambda entry with only the upstash store: what `npm run build:lambda` bundles as lambda-upstash.zip.
import { lambdaHandler } from '../app/lambda-handler.js';
import { upstashNodeStore } from '../app/node-stores/upstash.js';
import type { AppConfig } from '../app/env.js';

export const handler = lambdaHandler((config, options) => upstashNodeStore(config as Extract<AppConfig['store'], { kind: 'upstash' }>, options), ['upstash']);
