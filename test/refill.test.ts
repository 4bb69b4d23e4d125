// A refill written per second, minute, hour or day ('1000/day'): exactly the rate `count / seconds` is, in
// the library and in LIMITER_POLICIES; an invalid one fails when the limiter is made, naming the field.
import { describe, expect, it } from 'vitest';
import { buildLimiter } from '../functions/app/app.js';
import { loadConfig } from '../functions/app/env.js';
import { resolvePolicy } from '../src/core/policy.js';
import { ConfigError, createLimiter, memoryStore, type PolicyConfig } from '../src/index.js';

const defaults = { onStoreError: 'deny', timeoutMs: 1000 } as const;
const resolve = (config: unknown) => resolvePolicy('p', config, defaults);

describe('refill', () => {
  it("'1000/day' resolves to the very policy refillPerSecond: 1000 / 86400 does (5 / 432 tokens per second)", () => {
    const written = resolve({ capacity: 1000, refill: '1000/day' });
    expect(written).toEqual(resolve({ capacity: 1000, refillPerSecond: 1000 / 86400 }));
    expect(written).toMatchObject({ refillPerSecond: 1000 / 86400, rateNumerator: 5, rateDenominator: 432 });
  });

  it.each([
    ['10/second', 10],
    ['1.5/second', 1.5],
    ['90/minute', 90 / 60],
    ['1/minute', 1 / 60],
    ['3600/hour', 1],
    ['7/hour', 7 / 3600],
    ['1000/day', 1000 / 86400],
    ['1e3/day', 1000 / 86400],
    // The exponent is a JavaScript number's, either case (Number('1E3') is 1000, as the type says).
    ['1E3/day', 1000 / 86400],
    ['1.5E+1/minute', 15 / 60],
    ['1/day', 1 / 86400],
  ])('%s is refillPerSecond %d, exactly', (refill, perSecond) => {
    expect(resolve({ capacity: 1000, refill })).toEqual(resolve({ capacity: 1000, refillPerSecond: perSecond }));
  });

  // Each is a Refill to TypeScript (`${number}/day`): the doc comment gives the narrower grammar that
  // createLimiter holds it to, with a ConfigError naming the field.
  it.each(['-1/day', '.5/day', '0x10/day', '+1/day', '0/day', '1./day', ' 1/day', '1/Day', 'Infinity/day', '1e/day'])('%s compiles as a Refill but is refused', (refill) => {
    const bad = { capacity: 1, refill } as PolicyConfig;
    expect(() => createLimiter({ store: memoryStore(), policies: { p: bad } })).toThrow(ConfigError);
    expect(() => resolve(bad)).toThrow(/p\.refill must be/);
  });

  it('works for named limits and local limits, as refillPerSecond does', () => {
    const written: PolicyConfig = {
      limits: { burst: { capacity: 10, refill: '10/second' }, daily: { capacity: 1000, refill: '1000/day' } },
      onStoreError: 'local',
      local: { limits: { burst: { capacity: 5, refill: '5/second' }, daily: { capacity: 500, refill: '500/day' } } },
    };
    const numeric: PolicyConfig = {
      limits: { burst: { capacity: 10, refillPerSecond: 10 }, daily: { capacity: 1000, refillPerSecond: 1000 / 86400 } },
      onStoreError: 'local',
      local: { limits: { burst: { capacity: 5, refillPerSecond: 5 }, daily: { capacity: 500, refillPerSecond: 500 / 86400 } } },
    };
    expect(resolve(written)).toEqual(resolve(numeric));
    expect(resolve({ capacity: 10, refill: '1/second', onStoreError: 'local', local: { capacity: 1, refill: '30/minute' } }).local).toMatchObject({ refillPerSecond: 0.5 });
  });

  it('refills continuously: a day of 1000 gives a token back every 86.4 s, not all of them at midnight', async () => {
    const limiter = createLimiter({ store: memoryStore(), policies: { daily: { capacity: 1000, refill: '1000/day' } } });
    expect((await limiter.take('daily', 'k', { cost: 1000 })).allowed).toBe(true);
    const refused = await limiter.take('daily', 'k');
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterMs).toBeGreaterThan(86_300);
    expect(refused.retryAfterMs).toBeLessThanOrEqual(86_400);
  });

  it.each([
    [{ capacity: 1, refill: '1000/days' }, 'policies.p.refill', /must be "<count>\/<second\|minute\|hour\|day>", got "1000\/days"/],
    [{ capacity: 1, refill: '1000 per day' }, 'policies.p.refill', /got "1000 per day"/],
    [{ capacity: 1, refill: '-1/day' }, 'policies.p.refill', /must be/],
    [{ capacity: 1, refill: 1000 }, 'policies.p.refill', /got 1000/],
    [{ capacity: 1, refill: '0/day' }, 'policies.p.refill', /must be 1e-6 to 1e6 per second, got "0\/day"/],
    [{ capacity: 1, refill: '2000000/second' }, 'policies.p.refill', /must be 1e-6 to 1e6 per second/],
    [{ capacity: 1, refill: '1/day', refillPerSecond: 1 }, 'policies.p.refill', /replaces refillPerSecond/],
    [{ limits: { a: { capacity: 1, refill: '1/week' } } }, 'policies.p.limits.a.refill', /must be/],
    [{ limits: { a: { capacity: 1, refill: '1/day' } }, refill: '1/day' }, 'policies.p.limits', /replaces capacity and refillPerSecond \(or refill\)/],
    [{ capacity: 1e9, refill: '1/day' }, 'policies.p.refill', /is too slow for capacity/],
    [{ capacity: 10, refill: '10/second', onStoreError: 'local', local: { capacity: 1, refill: '20/second' } }, 'policies.p.local.refill', /to the policy's refillPerSecond \(10\), got "20\/second"/],
  ])('%j fails at creation, naming %s', (config, field, message) => {
    let error: unknown;
    try {
      createLimiter({ store: memoryStore(), policies: { p: config as PolicyConfig } });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).field).toBe(field);
    expect((error as Error).message).toMatch(message);
  });

  it('LIMITER_POLICIES takes the same form, and names the variable when it is wrong', async () => {
    const limiter = buildLimiter(loadConfig({ LIMITER_POLICIES: '{"api":{"limits":{"burst":{"capacity":10,"refill":"10/second"},"daily":{"capacity":1000,"refill":"1000/day"}}}}' }), memoryStore());
    const daily = limiter.policy('api')!.limits[1]!;
    expect(daily).toEqual(resolve({ limits: { daily: { capacity: 1000, refillPerSecond: 1000 / 86400 } } }).limits[0]);
    expect(daily).toMatchObject({ rateNumerator: 5, rateDenominator: 432 });
    expect(() => buildLimiter(loadConfig({ LIMITER_POLICIES: '{"api":{"capacity":10,"refill":"10 a day"}}' }), memoryStore())).toThrow(/LIMITER_POLICIES\.api\.refill must be "<count>\/<second\|minute\|hour\|day>"/);
  });
});
