// Environment configuration: store inference, validation messages that name the variable, no secrets echoed.
import { describe, expect, it } from 'vitest';
import { loadConfig, storeTimeoutMs } from '../functions/app/env.js';
import { buildLimiter } from '../functions/app/app.js';
import { memoryStore, ConfigError } from '../src/index.js';

describe('loadConfig', () => {
  it('infers the store from the variables present', () => {
    expect(loadConfig({}).store).toEqual({ kind: 'memory' });
    expect(loadConfig({ REDIS_URL: 'redis://127.0.0.1:6379' }).store).toMatchObject({ kind: 'redis', clientClock: false });
    expect(loadConfig({ UPSTASH_REDIS_REST_URL: 'https://x.example', UPSTASH_REDIS_REST_TOKEN: 't', REDIS_URL: 'redis://h' }).store.kind).toBe('upstash');
    expect(loadConfig({ MONGODB_URI: 'mongodb://h/db' }).store).toEqual({ kind: 'mongodb', uri: 'mongodb://h/db', db: 'edge_limiter', collection: 'token_buckets' });
    expect(loadConfig({ LIMITER_STORE: 'memory', REDIS_URL: 'redis://h' }).store.kind).toBe('memory');
    expect(loadConfig({ REDIS_URL: 'redis://h', LIMITER_CLIENT_CLOCK: 'true' }).store).toMatchObject({ clientClock: true });
  });

  it('parses tokens and gateway settings', () => {
    const c = loadConfig({ PERMIT_TOKENS: ' a, b ,,c', GATE_ORIGIN: 'https://origin.example/', GATE_KEY: 'header:X-Api-Key', LIMITER_POLICIES: '{"p":{"capacity":1,"refillPerSecond":1}}' });
    expect(c.tokens).toEqual(['a', 'b', 'c']);
    expect(c.gate).toEqual({
      origin: 'https://origin.example',
      policy: 'p',
      key: { header: 'x-api-key' },
      timeoutMs: 30_000,
      trustedProxies: [],
      ipv6Subnet: 64,
    });
    expect(c.limiter).toEqual({});
  });

  it('parses the robustness settings, and names the variable when one is invalid', () => {
    const base = { GATE_ORIGIN: 'https://o.example' };
    const c = loadConfig({
      ...base,
      GATE_TIMEOUT_MS: '2500',
      GATE_TRUSTED_PROXIES: '10.0.0.0/8, 2600:1f00::/24,192.0.2.7',
      GATE_IPV6_SUBNET: '56',
      LIMITER_CIRCUIT_BREAKER: '3/250',
      LIMITER_MAX_PENDING_STORE_CALLS: '64',
    });
    expect(c.gate).toMatchObject({ timeoutMs: 2500, trustedProxies: ['10.0.0.0/8', '2600:1f00::/24', '192.0.2.7'], ipv6Subnet: 56 });
    expect(c.limiter).toEqual({ circuitBreaker: { failureThreshold: 3, cooldownMs: 250 }, maxPendingStoreCalls: 64 });
    expect(loadConfig({ ...base, GATE_IPV6_SUBNET: 'off', LIMITER_CIRCUIT_BREAKER: 'off' })).toMatchObject({ gate: { ipv6Subnet: false }, limiter: { circuitBreaker: false } });
    for (const [name, value] of [
      ['GATE_TIMEOUT_MS', '0'],
      ['GATE_TIMEOUT_MS', '30s'],
      ['GATE_TRUSTED_PROXIES', '10.0.0.0/33'],
      ['GATE_TRUSTED_PROXIES', 'lb.internal'],
      ['GATE_IPV6_SUBNET', '129'],
      ['LIMITER_CIRCUIT_BREAKER', '5'],
      ['LIMITER_CIRCUIT_BREAKER', '0/100'],
      ['LIMITER_MAX_PENDING_STORE_CALLS', '-1'],
    ]) {
      expect(() => loadConfig({ ...base, [name!]: value }), `${name}=${value}`).toThrow(new RegExp(`invalid config: ${name}`));
    }
  });

  it('bounds store clients by the longest policy timeout', () => {
    expect(storeTimeoutMs(loadConfig({}))).toBe(1000);
    expect(storeTimeoutMs(loadConfig({ LIMITER_POLICIES: '{"a":{"capacity":1,"refillPerSecond":1,"timeoutMs":50},"b":{"capacity":1,"refillPerSecond":1,"timeoutMs":2500}}' }))).toBe(2500);
    expect(storeTimeoutMs(loadConfig({ LIMITER_POLICIES: '{"a":{"capacity":1,"refillPerSecond":1,"timeoutMs":50}}' }))).toBe(50);
  });

  const errors: [Record<string, string>, RegExp][] = [
    [{ LIMITER_STORE: 'dynamo' }, /LIMITER_STORE must be memory, redis, upstash, mongodb or durable-object/],
    [{ LIMITER_STORE: 'durable-object', LIMITER_DO_SHARDS: '0' }, /LIMITER_DO_SHARDS must be an integer/],
    [{ LIMITER_STORE: 'redis' }, /REDIS_URL is required/],
    [{ LIMITER_STORE: 'upstash', UPSTASH_REDIS_REST_URL: 'https://x.example' }, /UPSTASH_REDIS_REST_TOKEN is required/],
    [{ UPSTASH_REDIS_REST_URL: 'https://x.example', UPSTASH_REDIS_REST_TOKEN: 'secret\n' }, /UPSTASH_REDIS_REST_TOKEN has whitespace at an end or a line break/],
    [{ UPSTASH_REDIS_REST_URL: ' https://x.example', UPSTASH_REDIS_REST_TOKEN: 't' }, /UPSTASH_REDIS_REST_URL has whitespace at an end or a line break/],
    [{ UPSTASH_REDIS_REST_URL: 'https://x.exa\r\nmple', UPSTASH_REDIS_REST_TOKEN: 't' }, /UPSTASH_REDIS_REST_URL has whitespace/],
    [{ REDIS_URL: 'http://x' }, /REDIS_URL must use redis: or rediss:/],
    [{ LIMITER_POLICIES: '[1]' }, /LIMITER_POLICIES must be a JSON object/],
    [{ LIMITER_POLICIES: '{' }, /LIMITER_POLICIES is not valid JSON/],
    [{ GATE_ORIGIN: 'ftp://x' }, /GATE_ORIGIN must use http: or https:/],
    [{ GATE_ORIGIN: 'https://x', GATE_POLICY: 'nope' }, /GATE_POLICY names no policy/],
    [{ GATE_ORIGIN: 'https://x', GATE_KEY: 'cookie' }, /GATE_KEY must be "ip" or "header:<name>"/],
    [{ REDIS_URL: 'redis://h', LIMITER_CLIENT_CLOCK: 'yes' }, /LIMITER_CLIENT_CLOCK/],
  ];
  for (const [env, message] of errors) {
    it(`rejects ${JSON.stringify(env)}`, () => {
      expect(() => loadConfig(env)).toThrow(ConfigError);
      expect(() => loadConfig(env)).toThrow(message);
    });
  }

  it('config gaps: each is a ConfigError naming the variable', () => {
    const cases: [Record<string, string>, RegExp][] = [
      // No policy at all: before, GATE_ORIGIN took the first of none and threw a TypeError.
      [{ LIMITER_POLICIES: '{}', GATE_ORIGIN: 'https://o.example' }, /invalid config: LIMITER_POLICIES must define at least one policy/],
      [{ LIMITER_POLICIES: '{}' }, /invalid config: LIMITER_POLICIES must define at least one policy/],
      // A name found only on Object.prototype is no policy.
      [{ GATE_ORIGIN: 'https://o.example', GATE_POLICY: 'toString' }, /invalid config: GATE_POLICY names no policy in LIMITER_POLICIES: "toString"/],
      [{ GATE_ORIGIN: 'https://o.example', GATE_POLICY: '__proto__' }, /invalid config: GATE_POLICY names no policy/],
      // Five digits, but above 65536: before, the store's own error named `shards`.
      [{ LIMITER_STORE: 'durable-object', LIMITER_DO_SHARDS: '70000' }, /invalid config: LIMITER_DO_SHARDS must be an integer from 1 to 65536, got "70000"/],
    ];
    for (const [env, message] of cases) {
      let thrown: unknown;
      try {
        loadConfig(env);
      } catch (err) {
        thrown = err;
      }
      expect(thrown, JSON.stringify(env)).toBeInstanceOf(ConfigError);
      expect((thrown as Error).message, JSON.stringify(env)).toMatch(message);
    }
    expect(loadConfig({ LIMITER_STORE: 'durable-object', LIMITER_DO_SHARDS: '65536' }).store).toEqual({ kind: 'durable-object', shards: 65536 });
  });

  it('never repeats a secret-bearing value in its errors', () => {
    let msg = '';
    try {
      loadConfig({ REDIS_URL: 'redis//:hunter2@host' });
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/REDIS_URL is not a valid URL/);
    expect(msg).not.toContain('hunter2');
  });

  it('policy errors name the variable and the field', () => {
    const config = loadConfig({ LIMITER_POLICIES: '{"api":{"capacity":10,"refillPerSecond":-1}}' });
    expect(() => buildLimiter(config, memoryStore())).toThrow(/LIMITER_POLICIES\.api\.refillPerSecond must be a finite number from 1e-6 to 1e6, got -1/);
  });
});
