// The /healthz store ping, shared and remembered: probes that arrive while a ping is in flight wait for
// that one, and its answer is remembered for `cacheMs` from when it came (or timed out). So the store
// gets at most one ping per `cacheMs`, however many probes arrive at once and however long a ping takes
// (each is a billed command on Upstash).

export interface PingCacheOptions {
  /** Monotonic clock in ms. */
  monotonicMs: () => number;
  /** How long an answer is remembered, from when it came. */
  cacheMs: number;
  /** A ping not answered within this many ms counts as failed. */
  timeoutMs: number;
}

/** Returns whether the store answers, from one shared ping at most every `cacheMs`. */
export function cachedPing(ping: () => Promise<unknown>, options: PingCacheOptions): () => Promise<boolean> {
  const { monotonicMs, cacheMs, timeoutMs } = options;
  let last: { ok: boolean; atMs: number } | undefined;
  let inFlight: Promise<boolean> | undefined;

  async function pingOnce(): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([
        Promise.resolve().then(ping),
        new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('timeout')), timeoutMs))),
      ]);
      return true;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  return () => {
    if (inFlight) return inFlight;
    if (last && monotonicMs() - last.atMs < cacheMs) return Promise.resolve(last.ok);
    inFlight = pingOnce().then((ok) => {
      // Stamped when the answer came, not when the ping started.
      last = { ok, atMs: monotonicMs() };
      inFlight = undefined;
      return ok;
    });
    return inFlight;
  };
}
