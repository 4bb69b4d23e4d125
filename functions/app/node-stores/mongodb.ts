// The mongodb store for the Node and Lambda entries; its SDK is imported here and nowhere else.
import { mongoStore, type BucketDocument } from '../../../src/stores/mongodb.js';
import type { AppConfig } from '../env.js';
import type { NodeStore, StoreClientOptions } from './types.js';

export async function mongoNodeStore(config: Extract<AppConfig['store'], { kind: 'mongodb' }>, { timeoutMs }: StoreClientOptions): Promise<NodeStore> {
  const { MongoClient } = await import('mongodb');
  // Server side, each operation carries maxTimeMS (the call's timeout); client side, a socket that
  // stops answering and a wait for a pooled connection are bounded too.
  const client = new MongoClient(config.uri, {
    serverSelectionTimeoutMS: 2000,
    maxPoolSize: 20,
    socketTimeoutMS: timeoutMs + 1000,
    waitQueueTimeoutMS: timeoutMs,
  });
  const store = mongoStore({ collection: client.db(config.db).collection<BucketDocument>(config.collection), maxTimeMS: timeoutMs });
  await store.ensureIndexes().catch(() => {
    // Not fatal at start: decisions do not depend on the TTL index, only disk usage does.
  });
  return { store, close: () => client.close() };
}
