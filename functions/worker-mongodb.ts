// A Worker build that includes the MongoDB store and driver (nodejs_compat). It exists to measure what
// the driver costs in bundle size (npm run bench); Workers users should prefer the Upstash store.
import type { ExecutionContext } from 'hono';
import { MongoClient } from 'mongodb';
import { loadConfig } from './app/env.js';
import { buildApp } from './app/app.js';
import { mongoStore, type BucketDocument } from '../src/stores/mongodb.js';

let app: ReturnType<typeof buildApp>['app'] | undefined;

export default {
  fetch(request: Request, env: Record<string, unknown>, ctx: ExecutionContext) {
    if (!app) {
      const config = loadConfig(env);
      if (config.store.kind !== 'mongodb') throw new Error('this build needs LIMITER_STORE=mongodb');
      const client = new MongoClient(config.store.uri);
      const store = mongoStore({ collection: client.db(config.store.db).collection<BucketDocument>(config.store.collection) });
      app = buildApp(config, store).app;
    }
    return app.fetch(request, env, ctx);
  },
};
