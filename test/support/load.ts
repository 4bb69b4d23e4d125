// A bounded load generator for fault tests: N concurrent loops POSTing permits until stopped, each
// response recorded with its time, latency, status and reason. Traffic goes to loopback only.
export interface Sample {
  /** ms since the run started, when the request was sent. */
  at: number;
  latencyMs: number;
  status: number;
  policy: string;
  reason?: string;
  reasonHeader?: string | null;
  retryAfter?: string | null;
  error?: string;
}

export interface LoadRun {
  samples: Sample[];
  /** ms since the run started. */
  now(): number;
  sent(): number;
  stop(): Promise<void>;
}

export function startLoad(opts: { url: string; token: string; policies: string[]; concurrency: number; maxRequests?: number }): LoadRun {
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  const samples: Sample[] = [];
  let sent = 0;
  let stopped = false;
  const cap = opts.maxRequests ?? 200_000;
  const loops = Array.from({ length: opts.concurrency }, async (_, i) => {
    const policy = opts.policies[i % opts.policies.length]!;
    let n = 0;
    while (!stopped && sent < cap) {
      const at = now();
      sent++;
      try {
        const res = await fetch(`${opts.url}/v1/permits`, {
          method: 'POST',
          headers: { Authorization: `Bearer ${opts.token}`, 'Content-Type': 'application/json' },
          body: JSON.stringify({ policy, key: `load-${i}-${n++ % 50}` }),
          signal: AbortSignal.timeout(10_000),
        });
        const body = (await res.json()) as { reason?: string };
        samples.push({ at, latencyMs: now() - at, status: res.status, policy, reason: body.reason, reasonHeader: res.headers.get('x-ratelimit-reason'), retryAfter: res.headers.get('retry-after') });
      } catch (err) {
        samples.push({ at, latencyMs: now() - at, status: 0, policy, error: (err as Error).message });
      }
    }
  });
  return {
    samples,
    now,
    sent: () => sent,
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Open file descriptors of a process (sockets included), from /proc. */
export async function fdCount(pid: number): Promise<number> {
  const { readdir } = await import('node:fs/promises');
  return (await readdir(`/proc/${pid}/fd`)).length;
}
