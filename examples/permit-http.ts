// The permit API without the SDK. A 200 with waitMs > 0 is a reservation: sleep waitMs, then proceed.
const res = await fetch('https://limits.internal/v1/permits', {
  method: 'POST',
  headers: { Authorization: `Bearer ${process.env.PERMIT_TOKEN}`, 'Content-Type': 'application/json' },
  body: JSON.stringify({ policy: 'openai', key: 'org-42', maxWaitMs: 10_000 }),
});
if (res.status === 200) {
  const { waitMs } = (await res.json()) as { waitMs: number };
  if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
  // ...the permit is yours now: do the work.
} else if (res.status === 429) {
  console.log(`no permit within 10 s; retry after ${res.headers.get('Retry-After')} s`);
}

export {};
