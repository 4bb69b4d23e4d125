// Redis store: one EVALSHA per decision (EVAL once after NOSCRIPT). Works with an @upstash/redis
// client (HTTP) or a TCP client (ioredis, or the official `redis` package), taken structurally:
// no Redis SDK is imported here.
import { ConfigError, StoreError } from '../errors.js';
import type { StepArgs, StepOptions, StepResult, Store } from '../store.js';
import { GCRA_SCRIPT, GCRA_SCRIPT_SHA } from './redis-script.js';

/**
 * What the store needs from a client. Pass one of the supported SDK clients, or your own adapter.
 * `signal` is aborted when the limiter stops waiting: an adapter should cancel the command with it.
 */
export interface RedisScriptClient {
  evalsha(sha: string, keys: string[], args: string[], signal?: AbortSignal): Promise<unknown>;
  eval(script: string, keys: string[], args: string[], signal?: AbortSignal): Promise<unknown>;
  del(key: string): Promise<unknown>;
  ping(): Promise<unknown>;
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

export type RedisClientLike = RedisScriptClient | IoredisLike | NodeRedisLike | NodeRedisClusterLike | UpstashLike;

export interface RedisStoreOptions {
  /**
   * An @upstash/redis client, an ioredis client or Cluster, a `redis` client or cluster (createCluster),
   * or any RedisScriptClient adapter.
   *
   * Bounding each command: the limiter aborts a call when its timeoutMs passes and stops counting it, but
   * only the client can close the underlying request. The `redis` package receives the abort signal per
   * command. For ioredis, set `commandTimeout`; for @upstash/redis, set
   * `signal: () => AbortSignal.timeout(ms)` and `retry: false` (the store factories of the entries do).
   */
  client: RedisClientLike;
  /**
   * Explicit opt-in for servers that refuse TIME inside scripts: the caller's clock is sent instead.
   * Edge nodes with skewed clocks then disagree by their skew. Off by default, and only use it when
   * the store reports that TIME is refused.
   * @default false
   */
  clientClock?: boolean;
}

function adapt(client: RedisClientLike): RedisScriptClient {
  const c = client as unknown as Record<string, unknown>;
  if (typeof c.sendCommand === 'function' && typeof c.getSlotMaster === 'function') {
    // A script's keys must all live in one slot; ours has one key, so routing by it is always right,
    // and the EVAL after a NOSCRIPT goes to the same node.
    const cl = client as NodeRedisClusterLike;
    const opts = (signal?: AbortSignal) => (signal ? { abortSignal: signal } : undefined);
    return {
      evalsha: (sha, keys, args, signal) => cl.sendCommand(keys[0], false, ['EVALSHA', sha, String(keys.length), ...keys, ...args], opts(signal)),
      eval: (script, keys, args, signal) => cl.sendCommand(keys[0], false, ['EVAL', script, String(keys.length), ...keys, ...args], opts(signal)),
      del: (key) => cl.sendCommand(key, false, ['DEL', key]),
      ping: () => cl.sendCommand(undefined, true, ['PING']),
    };
  }
  if (typeof c.call === 'function') {
    const io = client as IoredisLike;
    return {
      evalsha: (sha, keys, args) => io.call('EVALSHA', sha, keys.length, ...keys, ...args),
      eval: (script, keys, args) => io.call('EVAL', script, keys.length, ...keys, ...args),
      del: (key) => io.call('DEL', key),
      ping: () => io.call('PING'),
    };
  }
  if (typeof c.sendCommand === 'function') {
    const nr = client as NodeRedisLike;
    const opts = (signal?: AbortSignal) => (signal ? { abortSignal: signal } : undefined);
    return {
      evalsha: (sha, keys, args, signal) => nr.sendCommand(['EVALSHA', sha, String(keys.length), ...keys, ...args], opts(signal)),
      eval: (script, keys, args, signal) => nr.sendCommand(['EVAL', script, String(keys.length), ...keys, ...args], opts(signal)),
      del: (key) => nr.sendCommand(['DEL', key]),
      ping: () => nr.sendCommand(['PING']),
    };
  }
  if (typeof c.evalsha === 'function' && typeof c.eval === 'function' && typeof c.del === 'function' && typeof c.ping === 'function') {
    const u = client as UpstashLike;
    return {
      evalsha: (sha, keys, args) => u.evalsha(sha, keys, args),
      eval: (script, keys, args) => u.eval(script, keys, args),
      del: (key) => u.del(key),
      ping: () => u.ping(),
    };
  }
  throw new ConfigError('client', 'must be an @upstash/redis, ioredis (client or Cluster) or redis (client or cluster) client, or implement evalsha/eval/del/ping');
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

// How servers refuse a command inside a script. The script calls only TIME, GET and SET, and a server
// that has GET and SET but refuses TIME (renamed, disabled, or a proxy that forbids it) says one of these.
const TIME_REFUSED = /(unknown|not allowed|disabled|unsupported|forbidden)[^\n]*(from|in|inside) script|\bTIME\b[^\n]*(not allowed|unknown|unsupported|disabled)/i;

/** Parses the script's `{allowed, debt}` reply. @upstash/redis may already have turned "12.5" into 12.5. */
function parseReply(reply: unknown): StepResult {
  if (!Array.isArray(reply) || reply.length !== 2) throw new Error(`unexpected script reply ${JSON.stringify(reply)?.slice(0, 100)}`);
  const allowed = Number(reply[0]);
  const debtMs = Number(reply[1]);
  if ((allowed !== 0 && allowed !== 1) || !Number.isFinite(debtMs) || debtMs < 0) {
    throw new Error(`unexpected script reply ${JSON.stringify(reply).slice(0, 100)}`);
  }
  return { allowed: allowed === 1, debtMs };
}

export function redisStore(options: RedisStoreOptions): Store {
  if (!options || typeof options !== 'object' || !options.client) throw new ConfigError('client', 'is required');
  const client = adapt(options.client);
  const clientClock = options.clientClock === true;

  async function run(keys: string[], args: string[], signal?: AbortSignal): Promise<unknown> {
    try {
      return await client.evalsha(GCRA_SCRIPT_SHA, keys, args, signal);
    } catch (err) {
      // Script cache flushed (restart, failover, SCRIPT FLUSH): load it by running it once with EVAL.
      if (!/NOSCRIPT/i.test(message(err)) || signal?.aborted) throw err;
      return await client.eval(GCRA_SCRIPT, keys, args, signal);
    }
  }

  return {
    name: 'redis',
    async step(key: string, args: StepArgs, options?: StepOptions): Promise<StepResult> {
      const argv = [String(args.costMs), String(args.limitMs), clientClock ? String(Date.now()) : ''];
      let reply: unknown;
      try {
        reply = await run([key], argv, options?.signal);
      } catch (err) {
        const m = message(err);
        if (!clientClock && TIME_REFUSED.test(m)) {
          throw new StoreError(
            'redis',
            `the server refused TIME inside a script (${m}). edge-limiter reads time from the store so that ` +
              'clients with skewed clocks agree; if this server cannot, opt in to redisStore({ clientClock: true }).',
            { cause: err },
          );
        }
        throw new StoreError('redis', `script failed: ${m}`, { cause: err });
      }
      try {
        return parseReply(reply);
      } catch (err) {
        throw new StoreError('redis', message(err), { cause: err });
      }
    },
    async reset(key: string): Promise<void> {
      try {
        await client.del(key);
      } catch (err) {
        throw new StoreError('redis', `DEL failed: ${message(err)}`, { cause: err });
      }
    },
    async ping(): Promise<void> {
      try {
        await client.ping();
      } catch (err) {
        throw new StoreError('redis', `PING failed: ${message(err)}`, { cause: err });
      }
    },
  };
}
