// An LLM API's requests and tokens per minute, shared by many Lambdas: reserve an estimate before the
// call, then settle that charge by the actual usage (usage.total_tokens), never refunding more than it took.
import { Redis } from '@upstash/redis';
import { createLimiter, settle } from 'edge-limiter';
import { redisStore } from 'edge-limiter/redis';
import { PermitClient } from 'edge-limiter/client';

const limiter = createLimiter({
  store: redisStore({ client: Redis.fromEnv({ retry: false, signal: () => AbortSignal.timeout(1000) }) }),
  policies: {
    // The provider's limits for the organization: 500 requests and 200,000 tokens a minute.
    llm: { limits: { requests: { capacity: 500, refillPerSecond: 500 / 60 }, tokens: { capacity: 200_000, refillPerSecond: 200_000 / 60 } } },
  },
});

interface Completion {
  choices: { message: { content: string } }[];
  usage: { total_tokens: number };
}

async function complete(prompt: string): Promise<Completion> {
  const res = await fetch('https://llm.example.com/v1/chat/completions', { method: 'POST', body: JSON.stringify({ prompt }) });
  return (await res.json()) as Completion;
}

// Directly against the store: one request and an estimate of 2,000 tokens are reserved (a wait, not a
// poll); afterwards the difference to the real usage is refunded or charged. Should that settlement
// fail, the answer is still returned, and the settlement is reported (onSettleError) to be retried.
export async function answer(orgId: string, prompt: string): Promise<string> {
  const result = await settle(
    limiter,
    { policy: 'llm', key: orgId, estimate: { requests: 1, tokens: 2000 }, actual: (r: Completion) => ({ requests: 1, tokens: r.usage.total_tokens }) },
    () => complete(prompt),
  );
  return result.choices[0]!.message.content;
}

// Or through the permit endpoint from any runtime: the same helper, with PermitClient (its token needs
// the permit and settle rights). The acquire carries an Idempotency-Key, its charge, and the settlement
// names it, so a retry of either after a lost answer is never applied twice.
const permits = new PermitClient({ url: 'https://limits.internal', token: process.env.PERMIT_TOKEN! });

export async function answerViaEndpoint(orgId: string, prompt: string): Promise<string> {
  const result = await settle(
    permits,
    { policy: 'llm', key: orgId, estimate: { requests: 1, tokens: 2000 }, actual: (r: Completion) => ({ requests: 1, tokens: r.usage.total_tokens }) },
    () => complete(prompt),
  );
  return result.choices[0]!.message.content;
}
