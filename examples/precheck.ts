// A serverless function that takes a permit from the shared store before calling a rate-limited API.
// acquire() reserves a slot in one round trip, then sleeps until it is due: no polling.
import { Redis } from '@upstash/redis';
import { createLimiter, AcquireTimeoutError } from 'edge-limiter';
import { redisStore } from 'edge-limiter/redis';

const limiter = createLimiter({
  store: redisStore({
    // No client retries, and no HTTP request outliving the limiter's timeout (1000 ms by default): a
    // retry could apply a decision the limiter has already given up on (and reported as a store error).
    client: Redis.fromEnv({ retry: false, signal: () => AbortSignal.timeout(1000) }),
  }),
  policies: { openai: { capacity: 50, refillPerSecond: 50 / 60 } }, // 50 requests a minute, shared
});

export async function summarize(orgId: string, text: string): Promise<string> {
  try {
    await limiter.acquire('openai', orgId, { timeoutMs: 20_000 });
  } catch (err) {
    if (err instanceof AcquireTimeoutError) throw new Error(`over the limit; tokens exist in ${err.retryAfterMs} ms`);
    throw err; // StoreError: the store is down and the policy fails closed
  }
  const res = await fetch('https://ai.example.com/v1/summarize', { method: 'POST', body: text });
  return res.text();
}
