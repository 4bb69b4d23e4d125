// What a Node/Lambda store factory returns, and what it is told.
import type { Store } from '../../../src/store.js';

export interface NodeStore {
  store: Store;
  /** Closes connections (for a clean shutdown). */
  close(): Promise<void>;
}

export interface StoreClientOptions {
  /** The longest store call a policy allows (storeTimeoutMs(config)): each client bounds a command by it. */
  timeoutMs: number;
}
