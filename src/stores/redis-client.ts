// The Redis clients the store drives, taken structurally (no Redis SDK is imported): @upstash/redis,
// ioredis (client or Cluster), the official `redis` package (client or cluster), or an adapter, each
// driven through one small interface; and how a client the store owns (closeClient) is closed.
import { ConfigError } from '../errors.js';

/**
 * What the store needs from a client. Pass one of the supported SDK clients, or your own adapter.
 * An adapter that sets `takesSignal: true` gets an abort signal with each script call, aborted when the
 * limiter stops waiting, and should cancel the command with it.
 */
export interface RedisScriptClient {
  evalsha(sha: string, keys: string[], args: string[], signal?: AbortSignal): Promise<unknown>;
  eval(script: string, keys: string[], args: string[], signal?: AbortSignal): Promise<unknown>;
  del(key: string): Promise<unknown>;
  ping(): Promise<unknown>;
  /**
   * Pass the abort signal to evalsha/eval. An adapter has the shape of an @upstash/redis client, whose
   * calls take no signal, so it gets none (and costs no AbortController) unless it says so here.
   * @default false
   */
  readonly takesSignal?: boolean;
}

/** ioredis: `call(command, ...args)` (it also has a `sendCommand`, of another shape, so `call` is checked first). */
interface IoredisLike {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  status?: string;
}
/** The official `redis` package (v5+): `sendCommand([command, ...args], { abortSignal })`. */
interface NodeRedisLike {
  sendCommand(args: string[], options?: { abortSignal?: AbortSignal }): Promise<unknown>;
}
/** The official `redis` package's cluster client (`createCluster`): commands are routed by their first key. */
interface NodeRedisClusterLike {
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[], options?: { abortSignal?: AbortSignal }): Promise<unknown>;
  getSlotMaster(slot: number): unknown;
}
/** @upstash/redis: `evalsha(sha, keys, args)`. */
interface UpstashLike {
  evalsha(sha: string, keys: string[], args: unknown[]): Promise<unknown>;
  eval(script: string, keys: string[], args: unknown[]): Promise<unknown>;
  del(...keys: string[]): Promise<unknown>;
  ping(): Promise<unknown>;
}

/** Any Redis client redisStore accepts: ioredis (or its Cluster), the official `redis` client (or its cluster), @upstash/redis, or an adapter of your own. */
export type RedisClientLike = RedisScriptClient | IoredisLike | NodeRedisLike | NodeRedisClusterLike | UpstashLike;

/** TCP clients (ioredis, `redis`): a round trip is cheap enough to send a lone decision at once. */
export function isTcpClient(client: RedisClientLike): boolean {
  const c = client as unknown as Record<string, unknown>;
  return typeof c.call === 'function' || typeof c.sendCommand === 'function';
}

/** Whether the client routes by key over a cluster (its scripts' keys must then share a slot). */
export function isCluster(client: RedisClientLike): boolean {
  const c = client as unknown as Record<string, unknown>;
  return c.isCluster === true || (typeof c.sendCommand === 'function' && typeof c.getSlotMaster === 'function');
}

/**
 * A client driven through one interface, and whether its commands take the limiter's abort signal
 * (the `redis` package's and adapters with `takesSignal: true` do; reading the signal for the others
 * would only make one).
 */
export interface AdaptedClient {
  client: RedisScriptClient;
  abortable: boolean;
}

/** Any client redisStore accepts: the TCP clients here, @upstash/redis and adapters in adaptScriptClient. */
export function adapt(client: RedisClientLike): AdaptedClient {
  const c = client as unknown as Record<string, unknown>;
  if (typeof c.sendCommand === 'function' && typeof c.getSlotMaster === 'function') {
    // A script's keys must all live in one slot; ours has one key, so routing by it is always right,
    // and the EVAL after a NOSCRIPT goes to the same node.
    const cl = client as NodeRedisClusterLike;
    const opts = (signal?: AbortSignal) => (signal ? { abortSignal: signal } : undefined);
    return {
      client: {
        evalsha: (sha, keys, args, signal) => cl.sendCommand(keys[0], false, ['EVALSHA', sha, String(keys.length), ...keys, ...args], opts(signal)),
        eval: (script, keys, args, signal) => cl.sendCommand(keys[0], false, ['EVAL', script, String(keys.length), ...keys, ...args], opts(signal)),
        del: (key) => cl.sendCommand(key, false, ['DEL', key]),
        ping: () => cl.sendCommand(undefined, true, ['PING']),
      },
      abortable: true,
    };
  }
  if (typeof c.call === 'function') {
    const io = client as IoredisLike;
    return {
      client: {
        evalsha: (sha, keys, args) => io.call('EVALSHA', sha, keys.length, ...keys, ...args),
        eval: (script, keys, args) => io.call('EVAL', script, keys.length, ...keys, ...args),
        del: (key) => io.call('DEL', key),
        ping: () => io.call('PING'),
      },
      abortable: false,
    };
  }
  if (typeof c.sendCommand === 'function') {
    const nr = client as NodeRedisLike;
    const opts = (signal?: AbortSignal) => (signal ? { abortSignal: signal } : undefined);
    return {
      client: {
        evalsha: (sha, keys, args, signal) => nr.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args], opts(signal)),
        eval: (script, keys, args, signal) => nr.sendCommand(['EVAL', script, String(keys.length), ...keys, ...args], opts(signal)),
        del: (key) => nr.sendCommand(['DEL', key]),
        ping: () => nr.sendCommand(['PING']),
      },
      abortable: true,
    };
  }
  return adaptScriptClient(client);
}

/**
 * An @upstash/redis client or a RedisScriptClient adapter. The Worker's store (functions/app/store-edge.ts)
 * has an @upstash/redis client only, and adapts it with this alone, so that its bundle holds no TCP
 * client's adapter.
 */
export function adaptScriptClient(client: RedisClientLike): AdaptedClient {
  const c = client as unknown as Record<string, unknown>;
  if (typeof c.evalsha === 'function' && typeof c.eval === 'function' && typeof c.del === 'function' && typeof c.ping === 'function') {
    if (c.takesSignal === true) return { client: client as RedisScriptClient, abortable: true };
    const u = client as UpstashLike;
    return {
      client: {
        evalsha: (sha, keys, args) => u.evalsha(sha, keys, args),
        eval: (script, keys, args) => u.eval(script, keys, args),
        del: (key) => u.del(key),
        ping: () => u.ping(),
      },
      abortable: false,
    };
  }
  throw new ConfigError('client', 'must be an @upstash/redis, ioredis or redis client (or cluster), or implement evalsha/eval/del/ping');
}

/**
 * How to close a client the store was given to own: `close()` (the `redis` package's client and cluster,
 * an adapter's), else `quit()` (ioredis, client and Cluster). Each lets the replies in flight arrive
 * first. undefined for a client with neither (an @upstash/redis client holds no connection to close).
 */
export function closerOf(client: RedisClientLike): (() => Promise<unknown>) | undefined {
  const c = client as unknown as { close?: () => Promise<unknown>; quit?: () => Promise<unknown> };
  if (typeof c.close === 'function') return () => c.close!();
  if (typeof c.quit === 'function') return () => c.quit!();
  return undefined;
}
