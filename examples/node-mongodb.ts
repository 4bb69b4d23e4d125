// A Node permit service on MongoDB: other services POST /v1/permits and get 200 or 429.
import { serve } from '@hono/node-server';
import { MongoClient } from 'mongodb';
import { createLimiter } from 'edge-limiter';
import { mongoStore, type BucketDocument } from 'edge-limiter/mongodb';
import { parsePermitTokens, permitApp } from 'edge-limiter/hono';

// Client-side bounds, so a call the limiter gave up on does not hold a connection.
const client = new MongoClient(process.env.MONGODB_URI!, { socketTimeoutMS: 2000, waitQueueTimeoutMS: 1000 });
const store = mongoStore({ collection: client.db('app').collection<BucketDocument>('token_buckets') });
await store.ensureIndexes(); // TTL index on expiresAt: a document goes once it decides nothing more (but see runtime-limits.md, not exact yet)

const limiter = createLimiter({ store, policies: { openai: { capacity: 60, refillPerSecond: 1 } } });
// PERMIT_TOKENS as the deployed app reads it: comma-separated, or scoped tokens as JSON (docs/security.md).
const app = permitApp({ limiter, tokens: parsePermitTokens(process.env.PERMIT_TOKENS, ['openai']) });
serve({ fetch: app.fetch, port: 8787 });
