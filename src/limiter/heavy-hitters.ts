// Who is being limited: a bounded summary of the keys seen most often (the space-saving algorithm of
// Metwally, Agrawal and El Abbadi). It keeps at most `capacity` entries whatever the traffic: a key not
// in the summary replaces the entry with the smallest count and inherits that count as its possible
// error. Every key whose true count exceeds total / capacity is in it, and each entry's true count lies
// in [count - error, count]. Pure: time is a parameter.

/** One tracked key. */
export interface HeavyHitter {
  key: string;
  /** An upper bound of the key's count (exact when `error` is 0). */
  count: number;
  /** How much of `count` may belong to keys it replaced: the true count is at least count - error. */
  error: number;
  /** When the entry was created (ms, the caller's clock): for a replaced entry, when this key took it over. */
  firstSeenMs: number;
  lastSeenMs: number;
}

export interface HeavyHitters {
  /** Counts one sighting of `key` at `nowMs`. */
  add(key: string, nowMs: number): void;
  /** The tracked keys, highest count first; at most `limit` of them. */
  top(limit?: number): HeavyHitter[];
  /** Entries held now (at most the capacity). */
  readonly size: number;
  /** Sightings counted since creation. */
  readonly total: number;
}

/**
 * A space-saving summary of at most `capacity` keys. Each add is one Map lookup, plus O(log capacity)
 * heap work; memory is `capacity` entries however many distinct keys arrive.
 */
export function createHeavyHitters(capacity: number): HeavyHitters {
  if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${String(capacity)}`);
  const byKey = new Map<string, HeavyHitter & { at: number }>();
  // A binary min-heap on count; each entry knows its index (`at`), so an increment sifts it in place.
  const heap: (HeavyHitter & { at: number })[] = [];
  let total = 0;

  function swap(i: number, j: number): void {
    const a = heap[i]!;
    const b = heap[j]!;
    heap[i] = b;
    heap[j] = a;
    a.at = j;
    b.at = i;
  }
  function down(i: number): void {
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < heap.length && heap[l]!.count < heap[m]!.count) m = l;
      if (r < heap.length && heap[r]!.count < heap[m]!.count) m = r;
      if (m === i) return;
      swap(i, m);
      i = m;
    }
  }
  function up(i: number): void {
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (heap[p]!.count <= heap[i]!.count) return;
      swap(i, p);
      i = p;
    }
  }

  return {
    get size() {
      return heap.length;
    },
    get total() {
      return total;
    },
    add(key, nowMs) {
      total++;
      const hit = byKey.get(key);
      if (hit) {
        hit.count++;
        hit.lastSeenMs = nowMs;
        down(hit.at);
        return;
      }
      if (heap.length < capacity) {
        const entry = { key, count: 1, error: 0, firstSeenMs: nowMs, lastSeenMs: nowMs, at: heap.length };
        heap.push(entry);
        byKey.set(key, entry);
        up(entry.at);
        return;
      }
      // Replace the smallest: the new key inherits its count as the error bound.
      const min = heap[0]!;
      byKey.delete(min.key);
      min.error = min.count;
      min.count++;
      min.key = key;
      min.firstSeenMs = nowMs;
      min.lastSeenMs = nowMs;
      byKey.set(key, min);
      down(0);
    },
    top(limit = capacity) {
      return [...heap]
        .sort((a, b) => b.count - a.count || a.key.localeCompare(b.key))
        .slice(0, limit)
        .map(({ key, count, error, firstSeenMs, lastSeenMs }) => ({ key, count, error, firstSeenMs, lastSeenMs }));
    },
  };
}
