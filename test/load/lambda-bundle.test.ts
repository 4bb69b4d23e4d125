// The deployable Lambda artifact: `npm run build:lambda` bundles functions/lambda.ts, and the bundle,
// loaded fresh (a cold start) with REDIS_URL, answers API Gateway v1/v2, Function URL and ALB events
// from its very first invocation with decisions made by Redis.
import { expect, it, inject } from 'vitest';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const fixture = (n: string) => fileURLToPath(new URL(`../fixtures/lambda/${n}.json`, import.meta.url));

it('npm run build:lambda produces a bundle that decides through Redis from the first invocation', { timeout: 60_000 }, async () => {
  await run('npm', ['run', 'build:lambda'], { cwd: root });
  const { stdout } = await run(
    process.execPath,
    [fileURLToPath(new URL('../support/lambda-invoke.mjs', import.meta.url)), `${root}/dist/lambda/index.mjs`, ...['apigw-v1', 'apigw-v2', 'function-url', 'alb'].map(fixture)],
    {
      env: {
        ...process.env,
        REDIS_URL: inject('redisUrl'),
        PERMIT_TOKENS: 'lambda-token',
        LIMITER_POLICIES: JSON.stringify({ api: { capacity: 3, refillPerSecond: 0.001 } }),
      },
    },
  );
  const results = stdout.trim().split('\n').map((l) => JSON.parse(l) as { statusCode: number; body: Record<string, unknown> });
  // All four events hit the same bucket in Redis: 3 allowed, then refused; no store errors at all.
  expect(results.map((r) => r.statusCode)).toEqual([200, 200, 200, 429]);
  for (const r of results) expect(r.body.reason).toBeUndefined();
  expect(results.map((r) => r.body.remaining)).toEqual([2, 1, 0, 0]);
});
