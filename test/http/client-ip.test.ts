// Client addresses as load balancers really write them: X-Forwarded-For entries with a port (Azure
// Application Gateway writes `ip:port`), IPv4-mapped IPv6 peers, and entries that are not addresses.
// A key is always the canonical text of an address, never whatever text the header held.
import { Hono, type Context } from 'hono';
import { describe, expect, it } from 'vitest';
import { createLimiter, memoryStore } from '../../src/index.js';
import { clientIp, ipKey, rateLimit } from '../../src/hono.js';
import { canonicalIp, formatIp, parseIpPort } from '../../src/http/ip.js';

const socket = (remoteAddress: string) => ({ incoming: { socket: { remoteAddress } } });

function appWith(f: (c: Context) => string | undefined) {
  const app = new Hono();
  app.get('/', (c) => c.text(f(c) ?? 'none'));
  return app;
}

async function seen(app: Hono, xff: string | undefined, env: object = socket('10.0.0.5')): Promise<string> {
  const res = await app.request('/', { headers: xff === undefined ? {} : { 'x-forwarded-for': xff } }, env);
  return res.text();
}

describe('parseIpPort / canonicalIp', () => {
  it('reads a.b.c.d:port and [v6]:port, drops the port, and canonicalises', () => {
    const cases: [string, string][] = [
      ['203.0.113.7:51234', '203.0.113.7'],
      ['203.0.113.7:0', '203.0.113.7'],
      ['203.0.113.7:65535', '203.0.113.7'],
      ['[2001:DB8::7]:443', '2001:db8::7'],
      ['[2001:db8::7]', '2001:db8::7'],
      ['[fe80::1%eth0]:8080', 'fe80::1'],
      ['::ffff:203.0.113.7', '203.0.113.7'],
      ['[::ffff:203.0.113.7]:80', '203.0.113.7'],
      ['::FFFF:cb00:7107', '203.0.113.7'],
      // Unbracketed, the last group is part of the address: this is 2001:db8::1:443, not a port.
      ['2001:db8::1:443', '2001:db8::1:443'],
      [' 198.51.100.1 ', '198.51.100.1'],
    ];
    for (const [text, canonical] of cases) {
      expect(formatIp(parseIpPort(text)!), text).toBe(canonical);
      expect(canonicalIp(text), text).toBe(canonical);
    }
    for (const bad of ['unknown', '_hidden', '203.0.113.7:', '203.0.113.7:65536', '203.0.113.7:80:80', '203.0.113.7:http', '[203.0.113.7]:80', '[2001:db8::7', '[2001:db8::7]443', '[2001:db8::7]:', '01.2.3.4', '1.2.3.4.5:80', '', 'example.com:80']) {
      expect(parseIpPort(bad), bad).toBeUndefined();
      expect(canonicalIp(bad), bad).toBeUndefined();
    }
  });
});

describe('X-Forwarded-For entries with a port', () => {
  it('with a hop count: the client is the address, not address:port (one bucket, not one per connection)', async () => {
    expect(await seen(appWith((c) => clientIp(c, { trustedProxies: 1 })), '6.6.6.6, 203.0.113.7:51234')).toBe('203.0.113.7');
    expect(await seen(appWith((c) => clientIp(c, { trustedProxies: 2 })), '203.0.113.7:51234, 10.0.0.4:443')).toBe('203.0.113.7');
    expect(await seen(appWith((c) => clientIp(c, { trustedProxies: 1 })), '[2001:db8:1:2::7]:51234')).toBe('2001:db8:1:2::7');
    expect(await seen(appWith(ipKey({ trustedProxies: 1 })), '[2001:db8:1:2::7]:51234')).toBe('2001:db8:1:2::/64');

    // Through the middleware: two connections of one client (two source ports) share its bucket.
    const limiter = createLimiter({ store: memoryStore(), policies: { p: { capacity: 1, refillPerSecond: 0.001 } } });
    const app = new Hono();
    app.use('*', rateLimit({ limiter, policy: 'p', key: ipKey({ trustedProxies: 1 }) }));
    app.get('/', (c) => c.text('ok'));
    const from = (xff: string) => app.request('/', { headers: { 'x-forwarded-for': xff } }, socket('10.0.0.5'));
    expect((await from('203.0.113.7:51234')).status).toBe(200);
    expect((await from('203.0.113.7:51235')).status).toBe(429);
    expect((await limiter.peek('p', '203.0.113.7')).remaining).toBe(0);
  });

  it('with a CIDR list: the walk goes on through ip:port hops, so clients do not share the proxy’s bucket', async () => {
    const app = appWith((c) => clientIp(c, { trustedProxies: ['10.0.0.0/8'] }));
    expect(await seen(app, '203.0.113.7:51234')).toBe('203.0.113.7');
    expect(await seen(app, '198.51.100.1, 203.0.113.9:443, 10.0.0.3:8080')).toBe('203.0.113.9');
    expect(await seen(app, '[2001:db8::9]:443, [::ffff:10.0.0.3]:8080')).toBe('2001:db8::9');
    const key = appWith(ipKey({ trustedProxies: ['10.0.0.0/8'] }));
    expect(await seen(key, '203.0.113.7:51234')).toBe('203.0.113.7');
    expect(await seen(key, '203.0.113.7:51235')).toBe('203.0.113.7');
  });
});

describe('IPv4-mapped IPv6', () => {
  it('clientIp returns the IPv4 form, for the peer and for header entries; a mapped peer is matched against IPv4 ranges', async () => {
    expect(await seen(appWith((c) => clientIp(c)), undefined, socket('::ffff:192.0.2.10'))).toBe('192.0.2.10');
    expect(await seen(appWith((c) => clientIp(c, { trustedProxies: ['10.0.0.0/8'] })), '::ffff:203.0.113.7', socket('::ffff:10.0.0.5'))).toBe('203.0.113.7');
    expect(await seen(appWith((c) => clientIp(c, { trustedProxies: 1 })), '::ffff:203.0.113.7')).toBe('203.0.113.7');
    expect(await seen(appWith(ipKey()), undefined, socket('::FFFF:192.0.2.10'))).toBe('192.0.2.10');
    // The Lambda sourceIp too.
    expect(await seen(appWith((c) => clientIp(c)), undefined, { event: { requestContext: { http: { sourceIp: '::ffff:198.51.100.7' } } } })).toBe('198.51.100.7');
  });

  it('CF-Connecting-IP on Workers is canonicalised too, and text that is no address there is no client', async () => {
    const app = appWith((c) => clientIp(c));
    const cf = (value: string) => {
      const req = new Request('http://h/', { headers: { 'cf-connecting-ip': value } });
      Object.defineProperty(req, 'cf', { value: { colo: 'AMS' } });
      return Promise.resolve(app.fetch(req)).then((r) => r.text());
    };
    expect(await cf('::ffff:203.0.113.5')).toBe('203.0.113.5');
    expect(await cf('2001:DB8::5')).toBe('2001:db8::5');
    expect(await cf('not-an-ip')).toBe('none');
  });
});

describe('text that is not an address is never a key', () => {
  const junk = ['unknown', '_hidden', 'evil.example', '203.0.113.7:99999', '[203.0.113.7]:80', 'a'.repeat(40)];

  it('with a hop count: the nearest trusted hop to its right is the client', async () => {
    for (const entry of junk) {
      expect(await seen(appWith((c) => clientIp(c, { trustedProxies: 1 })), entry), entry).toBe('10.0.0.5');
      expect(await seen(appWith(ipKey({ trustedProxies: 1 })), entry), entry).toBe('10.0.0.5');
      expect(await seen(appWith(ipKey({ trustedProxies: 2 })), `${entry}, 10.0.0.4`), entry).toBe('10.0.0.4');
    }
  });

  it('with a CIDR list: the walk stops at it (as before) and keys by the trusted hop', async () => {
    for (const entry of junk) expect(await seen(appWith(ipKey({ trustedProxies: ['10.0.0.0/8'] })), `${entry}, 10.0.0.4`), entry).toBe('10.0.0.4');
  });

  it('with no peer address (an unknown runtime), a hop count on junk gives no key: the middleware answers 400', async () => {
    for (const entry of junk) expect(await seen(appWith(ipKey({ trustedProxies: 1 })), entry, {}), entry).toBe('none');
    expect(await seen(appWith(ipKey({ trustedProxies: 1 })), '203.0.113.7:80', {})).toBe('203.0.113.7');
    // A peer that is not an address is no client either.
    expect(await seen(appWith(ipKey()), undefined, socket('garbage'))).toBe('none');

    const limiter = createLimiter({ store: memoryStore(), policies: { p: { capacity: 5, refillPerSecond: 1 } } });
    const app = new Hono();
    app.use('*', rateLimit({ limiter, policy: 'p', key: ipKey({ trustedProxies: 1 }) }));
    app.get('/', (c) => c.text('ok'));
    const res = await app.request('/', { headers: { 'x-forwarded-for': 'unknown' } });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toBe('application/problem+json');
    expect(await res.json()).toMatchObject({ type: 'urn:edge-limiter:problem:invalid-request' });
  });
});
