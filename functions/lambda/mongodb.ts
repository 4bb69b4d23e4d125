// AWS Lambda entry with only the mongodb store: what `npm run build:lambda` bundles as lambda-mongodb.zip.
import { lambdaHandler } from '../app/lambda-handler.js';
import { mongoNodeStore } from '../app/node-stores/mongodb.js';
import type { AppConfig } from '../app/env.js';

export const handler = lambdaHandler((config, options) => mongoNodeStore(config as Extract<AppConfig['store'], { kind: 'mongodb' }>, options), ['mongodb']);
