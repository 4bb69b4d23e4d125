// What the HTTP layers claim: no invented numbers on a fail-open answer, GET of a bucket tells whether a
// take would pass, /healthz costs at most one store ping a second, and addresses are parsed correctly.
import { Hono, type Context } from 'hono';
import { describe, expect, it } from 'vitest';
import { createLimiter, memoryStore, type Store } from '../../src/index.js';
import { permitApp, rateLimit, ipKey, clientIp } from '../../src/hono.js';
import { formatIp, inCidr, ipv6Subnet, parseCidr, parseIp } from '../../src/http/ip.js';
import { checked } from '../support/openapi-contract.js';

const down: Store = { name: 'redis', step: async () => Promise.reject(new Error('ECONNREFUSED')), reset: async () => {}, ping: async () => {} };
const policies = { open: { capacity: 5, refillPerSecond: 1, onStoreError: 'allow' as const }, closed: { capacity: 5, refillPerSecond: 1 } };

describe('a fail-open answer advertises no numbers the store did not give', () => {
  it('middleware: no RateLimit, X-RateLimit-Remaining or -Reset; the policy headers and the reason stay', async () => {
    const limiter = createLimiter({ store: down, circuitBreaker: false, policies });
    const app = new Hono();
    app.use('*', rateLimit({ limiter, policy: 'open', key: () => 'k' }));
    app.get('/', (c) => c.text('ok'));
    const res = await app.request('/');
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-reason')).toBe('store_error');
    expect(res.headers.get('ratelimit-policy')).toBe('"open";q=5;w=5');
    expect(res.headers.get('x-ratelimit-limit')).toBe('5');
    for (const h of ['ratelimit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'retry-after']) expect(res.headers.get(h), h).toBeNull();
  });

  it('permit endpoint: the 200 body has no remaining or resetAfterMs; the fail-closed 503 has Retry-After', async () => {
    const limiter = createLimiter({ store: down, circuitBreaker: false, policies });
    const app = checked(permitApp({ limiter, tokens: ['t'], log: () => {} }));
    const post = (policy: string) =>
      app.request('/v1/permits', { method: 'POST', headers: { Authorization: 'Bearer t', 'Content-Type': 'application/json' }, body: JSON.stringify({ policy, key: 'k' }) });
    const open = await post('open');
    expect(open.status).toBe(200);
    expect(await open.json()).toEqual({ allowed: true, policy: 'open', key: 'k', limit: 5, retryAfterMs: 0, waitMs: 0, reason: 'store_error' });
    expect(open.headers.get('ratelimit')).toBeNull();
    const closed = await post('closed');
    expect(closed.status).toBe(503);
    expect(closed.headers.get('retry-after')).toBe('1');
    expect(closed.headers.get('x-ratelimit-remaining')).toBeNull();
  });
});

describe('GET /v1/buckets/:policy/:key', () => {
  it('answers 200 and says allowed only when a take of 1 would pass now', async () => {
    const limiter = createLimiter({ store: memoryStore(), policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    const app = checked(permitApp({ limiter, tokens: ['t'], log: () => {} }));
    const get = async () => {
      const r = await app.request('/v1/buckets/p/k', { headers: { Authorization: 'Bearer t' } });
      return { status: r.status, body: (await r.json()) as Record<string, unknown> };
    };
    expect(await get()).toMatchObject({ status: 200, body: { allowed: true, remaining: 1, retryAfterMs: 0 } });
    const t0 = performance.now();
    await limiter.take('p', 'k');
    const empty = await get();
    expect(empty.status).toBe(200);
    expect(empty.body).toMatchObject({ allowed: false, remaining: 0 });
    // 1000 ms to the next token, less the time since the take (so a slow machine cannot fail it).
    expect(empty.body.retryAfterMs).toBeGreaterThanOrEqual(1000 - (performance.now() - t0) - 1);
    expect(empty.body.retryAfterMs).toBeLessThanOrEqual(1000);
  });
});

describe('/healthz', () => {
  it('pings the store at most once per second, however often it is asked', async () => {
    let now = 0;
    let pings = 0;
    let healthy = true;
    const store: Store = {
      ...memoryStore(),
      name: 'counted',
      inProcess: false,
      ping: async () => {
        pings++;
        if (!healthy) throw new Error('down');
      },
    };
    const limiter = createLimiter({ store, policies: { p: { capacity: 1, refillPerSecond: 1 } } });
    const app = checked(permitApp({ limiter, tokens: ['t'], monotonicMs: () => now }));
    for (let i = 0; i < 50; i++, now += 10) expect((await app.request('/healthz')).status).toBe(200);
    expect(pings).toBe(1);
    healthy = false;
    now = 1000;
    expect((await app.request('/healthz')).status).toBe(503);
    expect(pings).toBe(2);
    now = 1500;
    expect((await app.request('/healthz')).status).toBe(503);
    expect(pings).toBe(2);
    healthy = true;
    now = 2000;
    expect((await app.request('/healthz')).status).toBe(200);
    expect(pings).toBe(3);
  });
});

describe('client addresses', () => {
  const appWith = (f: (c: Context) => string | undefined) => {
    const app = new Hono();
    app.get('/', (c) => c.text(f(c) ?? 'none'));
    return app;
  };
  const socket = (remoteAddress: string) => ({ incoming: { socket: { remoteAddress } } });

  it('CIDR-trusted proxies: the right-most untrusted hop, and only when the peer is trusted', async () => {
    const app = appWith((c) => clientIp(c, { trustedProxies: ['10.0.0.0/8', 'fd00::/8'] }));
    const xff = { 'x-forwarded-for': '6.6.6.6, 203.0.113.9, 10.0.0.3' };
    expect(await (await app.request('/', { headers: xff }, socket('10.0.0.5'))).text()).toBe('203.0.113.9');
    expect(await (await app.request('/', { headers: xff }, socket('192.0.2.1'))).text()).toBe('192.0.2.1');
    expect(await (await app.request('/', { headers: { 'x-forwarded-for': '10.9.9.9' } }, socket('10.0.0.5'))).text()).toBe('10.9.9.9');
    expect(await (await app.request('/', { headers: { 'x-forwarded-for': '2001:db8::7' } }, socket('fd00::1'))).text()).toBe('2001:db8::7');
    // Behind an ALB the peer is the ALB's appended entry.
    const alb = { event: { requestContext: { elb: {} } } };
    expect(await (await app.request('/', { headers: { 'x-forwarded-for': '6.6.6.6, 203.0.113.9, 10.0.0.3' } }, alb)).text()).toBe('203.0.113.9');
    expect(() => clientIp({} as never, { trustedProxies: ['10.0.0.0/40'] })).toThrow(/prefix/);
  });

  it('ipKey canonicalises addresses and keys IPv6 by /64 unless told otherwise', async () => {
    const key = (opts?: Parameters<typeof ipKey>[0]) => appWith(ipKey(opts));
    expect(await (await key().request('/', {}, socket('2001:DB8:0:1:aaaa:bbbb:cccc:dddd'))).text()).toBe('2001:db8:0:1::/64');
    expect(await (await key().request('/', {}, socket('::ffff:192.0.2.10'))).text()).toBe('192.0.2.10');
    expect(await (await key({ ipv6Subnet: false }).request('/', {}, socket('2001:db8:0:0:0:0:0:1'))).text()).toBe('2001:db8::1');
    expect(await (await key({ ipv6Subnet: 48 }).request('/', {}, socket('2001:db8:abcd:12::1'))).text()).toBe('2001:db8:abcd::/48');
    expect(() => ipKey({ ipv6Subnet: 0 })).toThrow(/ipv6Subnet/);
  });

  it('parses and formats addresses and ranges', () => {
    expect(formatIp(parseIp('1.2.3.4')!)).toBe('1.2.3.4');
    for (const bad of ['1.2.3', '1.2.3.256', '01.2.3.4', '1::2::3', '12345::', 'gg::1', '', '1.2.3.4.5', ':::']) expect(parseIp(bad), bad).toBeUndefined();
    expect(formatIp(parseIp('[2001:db8::1]')!)).toBe('2001:db8::1');
    expect(formatIp(parseIp('fe80::1%eth0')!)).toBe('fe80::1');
    expect(formatIp(parseIp('2001:0:0:1:0:0:0:1')!)).toBe('2001:0:0:1::1');
    expect(formatIp(parseIp('::')!)).toBe('::');
    expect(formatIp(parseIp('1:2:3:4:5:6:7:8')!)).toBe('1:2:3:4:5:6:7:8');
    expect(formatIp(parseIp('::1.2.3.4')!)).toBe('::102:304');
    expect(inCidr(parseIp('10.255.0.1')!, parseCidr('10.0.0.0/8'))).toBe(true);
    expect(inCidr(parseIp('11.0.0.1')!, parseCidr('10.0.0.0/8'))).toBe(false);
    expect(inCidr(parseIp('172.31.255.255')!, parseCidr('172.16.0.0/12'))).toBe(true);
    expect(inCidr(parseIp('172.32.0.0')!, parseCidr('172.16.0.0/12'))).toBe(false);
    expect(inCidr(parseIp('::ffff:10.1.1.1')!, parseCidr('10.0.0.0/8'))).toBe(true);
    expect(inCidr(parseIp('10.1.1.1')!, parseCidr('::ffff:10.0.0.0/104'))).toBe(true);
    expect(inCidr(parseIp('2001:db8::1')!, parseCidr('10.0.0.0/8'))).toBe(false);
    expect(inCidr(parseIp('1.2.3.4')!, parseCidr('0.0.0.0/0'))).toBe(true);
    expect(ipv6Subnet(parseIp('2001:db8:1:2:3:4:5:6')!, 64)).toBe('2001:db8:1:2::/64');
    expect(ipv6Subnet(parseIp('2001:db8:1:2:3:4:5:6')!, 57)).toBe('2001:db8:1::/57');
    for (const bad of ['10.0.0.0/33', '10.0.0.0/-1', 'x/8', '10.0.0.0/8/8', '::/129']) expect(() => parseCidr(bad), bad).toThrow(RangeError);
  });
});
