// AWS Lambda entry with only the memory store: what `npm run build:lambda` bundles as lambda-memory.zip.
import { lambdaHandler } from '../app/lambda-handler.js';
import { memoryNodeStore } from '../app/node-stores/memory.js';
import type { AppConfig } from '../app/env.js';

export const handler = lambdaHandler((config, options) => memoryNodeStore(config as Extract<AppConfig['store'], { kind: 'memory' }>, options), ['memory']);
