// AWS Lambda entry (API Gateway REST v1 and HTTP API v2, Function URLs, ALB), through app/lambda-*.ts,
// with every store kind. `npm run build:lambda` bundles the smaller per-store entries in ./lambda/.
import { createNodeStore } from './app/store-node.js';
import { lambdaHandler } from './app/lambda-handler.js';

export const handler = lambdaHandler(createNodeStore);
