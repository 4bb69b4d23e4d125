// The permit endpoint's client SDK: fetch only, so it runs on Workers, Lambda, Node and browsers.
import { PermitClient, limitedFetch } from 'edge-limiter/client';

const permits = new PermitClient({ url: 'https://limits.internal', token: process.env.PERMIT_TOKEN! });
await permits.acquire('openai', 'org-42', { timeoutMs: 20_000 }); // AcquireTimeoutError if it cannot

// Or wrap fetch: every call waits for a permit from the shared remote bucket first.
const aiFetch = limitedFetch(fetch, { client: permits, policy: 'openai', key: 'org-42' });
await aiFetch('https://ai.example.com/v1/models');
