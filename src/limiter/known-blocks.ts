// The blocks this node knows of (from a store's answer, or a block made through this limiter), on its
// monotonic clock: a key known to be blocked stays refused while its block lasts even when the store
// does not answer, whatever the policy's fail mode. Bounded: beyond maxKeys the oldest entry goes.
export interface KnownBlocks {
  /** The key is blocked until monotonic untilMs. */
  note(storageKey: string, untilMs: number): void;
  /** The key is not blocked (an unblock through this node, or a store answer without a block). */
  clear(storageKey: string): void;
  /** Ms the key's known block has left at nowMs, or 0. */
  leftMs(storageKey: string, nowMs: number): number;
  readonly size: number;
}

export function createKnownBlocks(maxKeys: number): KnownBlocks {
  const until = new Map<string, number>();
  return {
    note(storageKey, untilMs) {
      until.delete(storageKey);
      if (until.size >= maxKeys) until.delete(until.keys().next().value!);
      until.set(storageKey, untilMs);
    },
    clear(storageKey) {
      until.delete(storageKey);
    },
    leftMs(storageKey, nowMs) {
      const u = until.get(storageKey);
      if (u === undefined) return 0;
      if (u <= nowMs) {
        until.delete(storageKey);
        return 0;
      }
      return Math.ceil(u - nowMs);
    },
    get size() {
      return until.size;
    },
  };
}
