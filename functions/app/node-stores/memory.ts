// The memory store for the Node and Lambda entries (one process; no SDK).
import { memoryStore } from '../../../src/stores/memory.js';
import type { AppConfig } from '../env.js';
import type { NodeStore, StoreClientOptions } from './types.js';

export async function memoryNodeStore(_config: Extract<AppConfig['store'], { kind: 'memory' }>, _options: StoreClientOptions): Promise<NodeStore> {
  return { store: memoryStore(), close: async () => {} };
}
