// A remote-like store for tests (not in-process, so the limiter's timeout, breaker and fail modes
// apply): a memory store underneath (its runtime limits too), a count of step calls, and a switch that
// makes every step and change fail.
import { memoryStore, type Store } from '../../src/index.js';

export interface SwitchableStore extends Store {
  /** Every step rejects while true. */
  down: boolean;
  /** Step calls made, failed ones included. */
  calls: number;
}

export function switchableStore(nowMs?: () => number): SwitchableStore {
  const inner = memoryStore(nowMs ? { nowMs } : {});
  const s: SwitchableStore = {
    name: 'switchable',
    down: false,
    calls: 0,
    async step(key, args) {
      s.calls++;
      if (s.down) throw new Error('ECONNREFUSED');
      return inner.step(key, args);
    },
    reset: (key) => inner.reset(key),
    async override(key, args) {
      if (s.down) throw new Error('ECONNREFUSED');
      return inner.override(key, args);
    },
    ping: async () => {},
  };
  return s;
}
