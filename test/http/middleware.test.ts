// The Hono middleware and key helpers (gateway mode is in gateway.test.ts).
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { describe, expect, it, vi } from 'vitest';
import { Hono, type Handler } from 'hono';
import { serve } from '@hono/node-server';
import { HTTPException } from 'hono/http-exception';
import { ConfigError, createLimiter, memoryStore, type Store } from '../../src/index.js';
import { rateLimit } from '../../src/http/middleware.js';
import { clientIp, headerKey, ipKey } from '../../src/http/key.js';

const policies = {
  free: { capacity: 2, refillPerSecond: 1 },
  premium: { capacity: 5, refillPerSecond: 1 },
  shadowed: { capacity: 1, refillPerSecond: 1, shadow: true },
  open: { capacity: 1, refillPerSecond: 1, onStoreError: 'allow' as const },
};

function appWith(opts: Partial<Parameters<typeof rateLimit>[0]> = {}, store: Store = memoryStore()) {
  const limiter = createLimiter({ store, policies, circuitBreaker: false, timeoutMs: 100 });
  const app = new Hono();
  app.use('*', rateLimit({ limiter, policy: 'free', key: headerKey('x-api-key'), ...opts }));
  app.get('/', (c) => c.text('hello'));
  app.post('/echo', async (c) => c.json(await c.req.json(), 201));
  return { app, limiter };
}

describe('rateLimit middleware', () => {
  it('passes allowed requests through with headers, then answers 429 problem+json with Retry-After', async () => {
    const { app } = appWith();
    const h = { 'x-api-key': 'abc' };
    const ok = await app.request('/', { headers: h });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toBe('hello');
    expect(ok.headers.get('ratelimit')).toBe('"free";r=1;t=1');
    expect(ok.headers.get('ratelimit-policy')).toBe('"free";q=2;w=2');
    await app.request('/', { headers: h });
    const denied = await app.request('/', { headers: h });
    expect(denied.status).toBe(429);
    expect(denied.headers.get('content-type')).toBe('application/problem+json');
    expect(denied.headers.get('retry-after')).toBe('1');
    expect(denied.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(await denied.json()).toMatchObject({ type: 'urn:edge-limiter:problem:rate-limited', status: 429, policy: 'free' });
    // Another key has its own bucket.
    expect((await app.request('/', { headers: { 'x-api-key': 'other' } })).status).toBe(200);
  });

  it('400 problem+json when the key cannot be derived', async () => {
    const { app } = appWith();
    const res = await app.request('/');
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toBe('application/problem+json');
  });

  it('onDenied replaces the 429 and still gets the headers', async () => {
    const { app } = appWith({ onDenied: (c) => c.text('slow down', 503) });
    const h = { 'x-api-key': 'k' };
    await app.request('/', { headers: h });
    await app.request('/', { headers: h });
    const res = await app.request('/', { headers: h });
    expect(res.status).toBe(503);
    expect(await res.text()).toBe('slow down');
    expect(res.headers.get('retry-after')).toBe('1');
  });

  it('skip bypasses counting', async () => {
    const { app, limiter } = appWith({ skip: (c) => c.req.header('x-internal') === '1' });
    for (let i = 0; i < 5; i++) expect((await app.request('/', { headers: { 'x-api-key': 'k', 'x-internal': '1' } })).status).toBe(200);
    expect((await limiter.peek('free', 'k')).remaining).toBe(2);
  });

  it('tiers: the policy is chosen per request', async () => {
    const { app } = appWith({ policy: (c) => (c.req.header('x-api-key')?.startsWith('pk_') ? 'premium' : 'free') });
    const count = async (key: string) => {
      let ok = 0;
      for (let i = 0; i < 8; i++) if ((await app.request('/', { headers: { 'x-api-key': key } })).status === 200) ok++;
      return ok;
    };
    expect(await count('pk_gold')).toBe(5);
    expect(await count('free-user')).toBe(2);
  });

  it('shadow mode never blocks, logs once per refusal, and still sets headers', async () => {
    const lines: Record<string, unknown>[] = [];
    const { app } = appWith({ policy: 'shadowed', log: (l) => lines.push(l) });
    const statuses = [];
    for (let i = 0; i < 3; i++) {
      const res = await app.request('/', { headers: { 'x-api-key': 'k' } });
      statuses.push(res.status);
      expect(res.headers.get('ratelimit')).toMatch(/^"shadowed";r=0;t=\d+$/);
    }
    expect(statuses).toEqual([200, 200, 200]);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({ policy: 'shadowed' });
  });

  it('store down: 503 problem+json for deny policies, pass-through with a reason header for allow policies', async () => {
    const down: Store = { name: 'redis', step: () => Promise.reject(new Error('ECONNREFUSED')), reset: async () => {}, ping: async () => {} };
    const closed = appWith({}, down).app;
    const res = await closed.request('/', { headers: { 'x-api-key': 'k' } });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    const open = appWith({ policy: 'open' }, down).app;
    const ok = await open.request('/', { headers: { 'x-api-key': 'k' } });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('x-ratelimit-reason')).toBe('store_error');
  });

  // The headers are set on the handler's response after it returns (not by c.header() before next():
  // Hono drops those when a handler returns a Response of its own, and a handler's later c.header()
  // would override them). bench/middleware-ab.ts measured no speed difference between the two.
  describe('the headers on whatever the handler returns', () => {
    const gated = (handler: Handler) => {
      const app = new Hono();
      app.use('*', rateLimit({ limiter: createLimiter({ store: memoryStore(), policies }), policy: 'free', key: () => 'k' }));
      app.get('/', handler);
      return app;
    };
    const ours = (res: Response) => [res.headers.get('ratelimit'), res.headers.get('ratelimit-policy'), res.headers.get('x-ratelimit-limit')];

    it('a Response the handler makes itself keeps its status, body and headers, and gets ours', async () => {
      const res = await gated(() => new Response('raw', { status: 201, headers: { 'X-Own': '1', 'Content-Type': 'text/csv' } })).request('/');
      expect(res.status).toBe(201);
      expect(await res.text()).toBe('raw');
      expect([res.headers.get('x-own'), res.headers.get('content-type')]).toEqual(['1', 'text/csv']);
      expect(ours(res)).toEqual(['"free";r=1;t=1', '"free";q=2;w=2', '2']);
    });

    it('a Response with immutable headers (fetch(), Response.redirect()) is copied with ours added', async () => {
      const res = await gated(() => Response.redirect('https://example.com/next', 302)).request('/');
      expect(res.status).toBe(302);
      expect(res.headers.get('location')).toBe('https://example.com/next');
      expect(ours(res)).toEqual(['"free";r=1;t=1', '"free";q=2;w=2', '2']);
    });

    it("the limiter's fields are its own: a handler's RateLimit header of the same name is replaced, others stay", async () => {
      const viaContext = await gated((c) => {
        c.header('RateLimit', '"handler";r=0;t=9');
        c.header('X-Own', '1');
        return c.text('ok');
      }).request('/');
      expect(viaContext.headers.get('ratelimit')).toBe('"free";r=1;t=1');
      expect(viaContext.headers.get('x-own')).toBe('1');
      const viaJson = await gated((c) => c.json({}, 200, { 'RateLimit-Policy': '"handler";q=1;w=1' })).request('/');
      expect(viaJson.headers.get('ratelimit-policy')).toBe('"free";q=2;w=2');
    });

    it("an error the handler throws still answers with the headers (Hono's error response)", async () => {
      const quiet = vi.spyOn(console, 'error').mockImplementation(() => {}); // Hono logs the error
      let plain: Response;
      try {
        plain = await gated(() => {
          throw new Error('boom');
        }).request('/');
      } finally {
        quiet.mockRestore();
      }
      expect(plain.status).toBe(500);
      expect(ours(plain)).toEqual(['"free";r=1;t=1', '"free";q=2;w=2', '2']);
      const own = await gated(() => {
        throw new HTTPException(418, { res: new Response('teapot', { status: 418, headers: { 'X-Own': '1' } }) });
      }).request('/');
      expect(own.status).toBe(418);
      expect(own.headers.get('x-own')).toBe('1');
      expect(ours(own)).toEqual(['"free";r=1;t=1', '"free";q=2;w=2', '2']);
    });

    it('two limiters on one route: the outer one sets its headers last, so they are the ones sent', async () => {
      const limiter = createLimiter({ store: memoryStore(), policies });
      const app = new Hono();
      app.use('*', rateLimit({ limiter, policy: 'premium', key: () => 'k' }));
      app.use('*', rateLimit({ limiter, policy: 'free', key: () => 'k' }));
      app.get('/', (c) => c.text('ok'));
      const res = await app.request('/');
      expect(res.headers.get('ratelimit-policy')).toBe('"premium";q=5;w=5');
      expect(res.headers.get('ratelimit')).toBe('"premium";r=4;t=1');
      // Both were charged; the inner one refuses on its own.
      await app.request('/');
      expect((await app.request('/')).status).toBe(429);
    });
  });

  it('answers a request it cannot key with 400 invalid-request whose detail names what is missing', async () => {
    const problemOf = async (res: Response) => {
      expect(res.status).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      return (await res.json()) as { type: string; detail: string };
    };
    const { app } = appWith();
    // Two empty copies reach the app joined as ', ': nothing but separators is no key either.
    const twoEmpty = new Headers([['x-api-key', ''], ['x-api-key', ' ']]);
    expect(twoEmpty.get('x-api-key')).toBe(', ');
    for (const headers of [{}, { 'x-api-key': '' }, twoEmpty, { 'x-api-key': ' ,\t, ,' }] as HeadersInit[]) {
      const problem = await problemOf(await app.request('/', { headers }));
      expect(problem.type).toMatch(/invalid-request$/);
      expect(problem.detail).toBe('the request has no x-api-key header (or an empty one) to identify the client');
    }
    expect((await problemOf(await appWith({ key: headerKey('X-Client-Id') }).app.request('/'))).detail).toContain('no x-client-id header');
    expect((await problemOf(await appWith({ key: ipKey() }).app.request('/'))).detail).toBe('no client address is known for the request');
    // A key function of one's own has no `missing`: the general detail.
    expect((await problemOf(await appWith({ key: () => undefined }).app.request('/'))).detail).toBe('cannot identify the client to rate-limit this request');
  });

  it('answers a header sent only as empty copies with the same 400 over a real socket (@hono/node-server)', async () => {
    const { app } = appWith();
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise((resolve) => server.once('listening', resolve));
    const { port } = server.address() as AddressInfo;
    const raw = (fields: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect(port, '127.0.0.1', () => socket.write(`GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${fields}\r\n`));
        let reply = '';
        socket.on('data', (d) => (reply += d));
        socket.on('end', () => resolve(reply));
        socket.on('error', reject);
      });
    try {
      for (const fields of ['x-api-key:\r\nx-api-key:\r\n', 'x-api-key: \r\nx-api-key: \t\r\n', 'x-api-key: ,\r\n']) {
        const reply = await raw(fields);
        expect(reply.split('\r\n')[0]).toBe('HTTP/1.1 400 Bad Request');
        expect(reply).toMatch(/content-type: application\/problem\+json/i);
        expect(reply).toContain('the request has no x-api-key header (or an empty one)');
      }
      // A real key still goes through.
      expect((await raw('x-api-key: k\r\n')).split('\r\n')[0]).toBe('HTTP/1.1 200 OK');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('headerKey refuses a name that is no HTTP field name when it is made, naming the option', () => {
    for (const name of ['', ' x-api-key ', 'x api key', 'x-api-key\n', 'x:y', 'clé', undefined as unknown as string]) {
      expect(() => headerKey(name)).toThrow(ConfigError);
      expect(() => headerKey(name)).toThrow(/invalid config: headerKey\(name\) must be an HTTP field name/);
    }
    for (const name of ['x-api-key', 'X-Client-Id', "a!#$%&'*+.^_`|~0"]) expect(() => headerKey(name)).not.toThrow();
  });

  it('misconfiguration throws when the middleware is created', () => {
    const limiter = createLimiter({ store: memoryStore(), policies });
    expect(() => rateLimit({ limiter, policy: 'nope', key: headerKey('x') })).toThrow(/unknown policy/);
    expect(() => rateLimit({ limiter, policy: 'free', key: 'ip' as never })).toThrow(/key/);
  });
});

describe('clientIp', () => {
  const ipApp = (opts?: Parameters<typeof ipKey>[0]) => {
    const app = new Hono();
    app.get('/', (c) => c.text(clientIp(c, opts) ?? 'none'));
    return app;
  };
  it('ignores X-Forwarded-For unless proxies are trusted, then takes the Nth from the right', async () => {
    const headers = { 'x-forwarded-for': '6.6.6.6, 1.1.1.1, 10.0.0.2' };
    expect(await (await ipApp().request('/', { headers })).text()).toBe('none');
    expect(await (await ipApp({ trustedProxies: 1 }).request('/', { headers })).text()).toBe('10.0.0.2');
    expect(await (await ipApp({ trustedProxies: 2 }).request('/', { headers })).text()).toBe('1.1.1.1');
  });
  it('uses the Lambda source IP and the Node socket address', async () => {
    const app = ipApp();
    expect(await (await app.request('/', {}, { event: { requestContext: { http: { sourceIp: '9.9.9.9' } } } })).text()).toBe('9.9.9.9');
    expect(await (await app.request('/', {}, { event: { requestContext: { identity: { sourceIp: '8.8.8.8' } } } })).text()).toBe('8.8.8.8');
    expect(
      await (await app.request('/', { headers: { 'x-forwarded-for': '5.5.5.5, 7.7.7.7' } }, { event: { requestContext: { elb: { targetGroupArn: 'x' } } } })).text(),
    ).toBe('7.7.7.7');
    expect(await (await app.request('/', {}, { incoming: { socket: { remoteAddress: '127.0.0.1' } } })).text()).toBe('127.0.0.1');
  });
});
