// MongoDB through the official driver: one collection, one document per bucket.
import { MongoClient } from 'mongodb';
import { mongoStore, type BucketDocument } from 'edge-limiter/mongodb';

const client = new MongoClient(process.env.MONGODB_URI!, { socketTimeoutMS: 2000, waitQueueTimeoutMS: 1000 });
export const store = mongoStore({ collection: client.db('app').collection<BucketDocument>('token_buckets') });
await store.ensureIndexes(); // TTL index on expiresAt: a document goes once it decides nothing more (but see runtime-limits.md, not exact yet)
