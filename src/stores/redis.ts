// Redis store: one EVALSHA per decision (EVAL once after NOSCRIPT). Works with an @upstash/redis
// client (HTTP) or a TCP client (ioredis, or the official `redis` package), taken structurally:
// no Redis SDK is imported here.
import { repeatOf, step, type BucketState } from '../core/gcra.js';
import { ConfigError, StoreError } from '../errors.js';
import type { StepArgs, StepOptions, StepResult, Store } from '../store.js';
import { GCRA_BATCH_SCRIPT, GCRA_BATCH_SCRIPT_SHA, GCRA_SCRIPT, GCRA_SCRIPT_SHA } from './redis-script.js';
import { keySlot } from './redis-slot.js';

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

/** Options of redisStore: the client, batching, and the opt-in to the caller's clock for servers that refuse TIME in scripts. */
export interface RedisStoreOptions {
  /**
   * An @upstash/redis client, an ioredis client or Cluster, a `redis` client or cluster (createCluster),
   * or any RedisScriptClient adapter.
   *
   * Bounding each command: the limiter aborts a call when its timeoutMs passes and stops counting it, but
   * only the client can close the underlying request. The `redis` package receives the abort signal per
   * command, and so does an adapter with `takesSignal: true`. For ioredis, set `commandTimeout`; for @upstash/redis, set
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
  /**
   * The clock sent in client-clock mode, in ms since the epoch (sent as whole µs). Tests inject a fake
   * one to run exact models against the scripts; only with `clientClock: true`. @default Date.now
   */
  nowMs?: () => number;
  /**
   * Automatic batching: decisions wait for the event loop's next turn (Node's setImmediate; a
   * microtask where there is none) and then go to Redis as one script call that reads TIME once and
   * decides each key in order, atomically, exactly as one call per decision would. Over TCP (ioredis,
   * `redis`), where a round trip costs less than a turn, a decision with no call in flight is sent at
   * once instead, so light traffic waits for nothing, and while fewer than two calls are in flight a
   * group that reaches half of the previous turn's decisions (at least 8) goes at once, so that Redis
   * runs one batch while the next gathers. Over HTTP (@upstash/redis) every decision waits
   * the turn: a request costs far more, and a batch is one billed command. A batch of one uses the
   * single-key script. On Redis Cluster, batches are grouped by hash slot. `false` sends every
   * decision on its own.
   * @default { maxSize: 64 }
   */
  batch?: false | { /** Most decisions in one script call (1-1000). @default 64 */ maxSize?: number };
}

/** TCP clients (ioredis, `redis`): a round trip is cheap enough to send a lone decision at once. */
function isTcpClient(client: RedisClientLike): boolean {
  const c = client as unknown as Record<string, unknown>;
  return typeof c.call === 'function' || typeof c.sendCommand === 'function';
}

/** Whether the client routes by key over a cluster (its scripts' keys must then share a slot). */
function isCluster(client: RedisClientLike): boolean {
  const c = client as unknown as Record<string, unknown>;
  return c.isCluster === true || (typeof c.sendCommand === 'function' && typeof c.getSlotMaster === 'function');
}

/**
 * The client driven through one interface, and whether its commands take the limiter's abort signal
 * (the `redis` package's and adapters with `takesSignal: true` do; reading the signal for the others
 * would only make one).
 */
function adapt(client: RedisClientLike): { client: RedisScriptClient; abortable: boolean } {
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
  throw new ConfigError('client', 'must be an @upstash/redis, ioredis (client or Cluster) or redis (client or cluster) client, or implement evalsha/eval/del/ping');
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

// How servers refuse a command inside a script. The script calls only TIME, GET and SET, and a server
// that has GET and SET but refuses TIME (renamed, disabled, or a proxy that forbids it) says one of these.
const TIME_REFUSED = /(unknown|not allowed|disabled|unsupported|forbidden)[^\n]*(from|in|inside) script|\bTIME\b[^\n]*(not allowed|unknown|unsupported|disabled)/i;

function badReply(reply: unknown): Error {
  return new Error(`unexpected script reply ${JSON.stringify(reply)?.slice(0, 100)}`);
}

/**
 * The store clock's reading in whole µs as the script replied it (an integer: TIME's seconds × 10^6 plus
 * its microseconds, below 2^53); in client-clock mode, the time sent. NaN for anything else.
 */
function nowOf(replied: unknown, sentNowUs: number | undefined): number {
  if (sentNowUs !== undefined) return sentNowUs;
  return Number.isSafeInteger(replied) ? (replied as number) : NaN;
}

/**
 * The stored value a reply gives from index i on (the scripts' `read`): a count, then that many integers
 * (the usual value's numbers), 0 for no key, or -1 and the value as stored. Returns it (null: no key;
 * undefined: not a reply the scripts make) and the index after it.
 */
function storedAt(reply: readonly unknown[], i: number): { stored: number[] | string | null | undefined; next: number } {
  const count = reply[i];
  if (count === 0) return { stored: null, next: i + 1 };
  if (count === -1) return { stored: typeof reply[i + 1] === 'string' ? (reply[i + 1] as string) : undefined, next: i + 2 };
  if (!Number.isSafeInteger(count) || (count as number) < 2 || i + 1 + (count as number) > reply.length) return { stored: undefined, next: reply.length + 1 };
  return { stored: reply.slice(i + 1, i + 1 + (count as number)) as number[], next: i + 1 + (count as number) };
}

/**
 * A stored "<debt1>:...:<debtN>:<atUs>" as the scripts' `fields` reads it: numbers joined by ':', at
 * least two, the last the clock reading (undefined where it reads a full bucket). Lua's tonumber reads
 * no number in an empty or blank field, where JavaScript's Number reads 0, so those are refused here too.
 */
function stateOf(stored: string | number | readonly unknown[] | null): BucketState | undefined {
  // The usual value, as the scripts' `read` replies it: its numbers as integers (each below 2^53).
  if (Array.isArray(stored)) {
    if (stored.length < 2 || !stored.every((x) => Number.isSafeInteger(x) && (x as number) >= 0)) return undefined;
    return { debtUnits: stored.slice(0, -1) as number[], atUs: stored[stored.length - 1] as number };
  }
  if (typeof stored !== 'string') return undefined;
  const parts = stored.split(':');
  if (parts.length < 2) return undefined;
  const nums = new Array<number>(parts.length);
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    const x = Number(part);
    if (!Number.isFinite(x) || part.trim() === '') return undefined;
    nums[i] = x;
  }
  const atUs = nums.pop()!;
  return { debtUnits: nums, atUs };
}

/**
 * Reads one key's part of a reply: the verdict (1 or 0), the clock, the stored value the step read (null:
 * no key; its numbers as integers, or the value as stored) and, for a partial grant, the tokens. The script decided and wrote; the client redoes the same
 * step (core/gcra.ts `step`, the script's arithmetic on the same integers) for the debt, so no Redis time
 * goes into formatting it. A step that does not reach the script's verdict means a stored value the two
 * sides read differently (something written by hand): not a bucket this store wrote, so a bad reply.
 */
function resultOf(args: StepArgs, verdict: unknown, nowUs: number, stored: unknown, tokensReply?: unknown): StepResult {
  const allowed = Number(verdict);
  const tokens = tokensReply === undefined ? undefined : Number(tokensReply);
  const state = Array.isArray(stored) || typeof stored === 'string' || typeof stored === 'number' ? stateOf(stored) : undefined;
  if (
    (allowed !== 0 && allowed !== 1) ||
    !Number.isFinite(nowUs) ||
    (stored !== null && typeof stored !== 'string' && typeof stored !== 'number' && !(Array.isArray(stored) && state !== undefined)) ||
    (tokens !== undefined && !(Number.isInteger(tokens) && tokens >= 0))
  ) {
    throw badReply([verdict, nowUs, stored, tokensReply]);
  }
  const r = step(state, nowUs, args);
  if (r.allowed !== (allowed === 1) || r.tokens !== tokens || r.debtUnits.length !== args.limits.length || !r.debtUnits.every(Number.isFinite)) {
    throw badReply([verdict, nowUs, stored, tokensReply]);
  }
  return tokens === undefined ? { allowed: r.allowed, debtUnits: r.debtUnits, atUs: nowUs } : { allowed: r.allowed, debtUnits: r.debtUnits, tokens, atUs: nowUs };
}

/**
 * The key of an operation id's record: in the bucket key's Redis Cluster hash slot, so one script can
 * touch both. A bucket key with a hash tag lends it to the record's key; one without any `}` becomes
 * the record key's tag (its slot is its own CRC either way); any other gets a short tag of the same slot.
 * It starts with NUL, which no bucket key does (a bucket key starts with the limiter's prefix, which may
 * hold no NUL, or a policy name), and holds the bucket key's length before it, so no record key is a
 * bucket key and no two (key, id) share one.
 */
export function opKeyOf(key: string, id: string): string {
  const open = key.indexOf('{');
  const close = open >= 0 ? key.indexOf('}', open + 1) : -1;
  const tail = `${key.length}:${key}\u0000${id}`;
  if (close > open + 1) return `\u0000op\u0000${tail}`;
  if (!key.includes('}')) return `\u0000op\u0000{${key}}${tail}`;
  return `\u0000op\u0000{${tagOfSlot(keySlot(key))}}${tail}`;
}

const slotTags = new Map<number, string>();
/** The first of "0", "1", "2", ... whose slot is `slot` (about 16,384 tries at most; cached). */
function tagOfSlot(slot: number): string {
  let tag = slotTags.get(slot);
  for (let i = 0; tag === undefined; i++) if (keySlot(String(i)) === slot) tag = String(i);
  slotTags.set(slot, tag);
  return tag;
}

/**
 * A recorded operation's answer: the record is the step's reply material ("<fingerprint>\n<verdict>\n
 * <now>\n<tokens>\n<value read>"), from which the same step is redone to the same result, then given as
 * core's repeatOf does (repeated, or a conflict when the fingerprint differs).
 */
function repeated(args: StepArgs, record: unknown, withTokens: boolean): StepResult {
  if (typeof record !== 'string') throw badReply(['op', record]);
  const parts = record.split('\n');
  if (parts.length !== 5) throw badReply(['op', record]);
  const [fingerprint, verdict, now, tokens, value] = parts as [string, string, string, string, string];
  // Another request's record: its step cannot be redone with these arguments, and nothing is applied.
  if (fingerprint !== args.op!.fingerprint) return { allowed: false, debtUnits: [], atUs: Number(now), conflict: true };
  const first = resultOf({ ...args, op: undefined }, verdict, Number(now), value === '' ? null : value, withTokens ? tokens : undefined);
  return repeatOf({ ...first, atUs: Number(now), fingerprint }, args);
}

/** Turns a script failure into the StoreError the limiter reports (naming the TIME opt-in where it applies). */
function scriptError(err: unknown, clientClock: boolean): StoreError {
  const m = message(err);
  if (!clientClock && TIME_REFUSED.test(m)) {
    return new StoreError(
      'redis',
      `the server refused TIME inside a script (${m}). edge-limiter reads time from the store so that ` +
        'clients with skewed clocks agree; if this server cannot, opt in to redisStore({ clientClock: true }).',
      { cause: err },
    );
  }
  return new StoreError('redis', `script failed: ${m}`, { cause: err });
}

interface Pending {
  key: string;
  args: StepArgs;
  signal: AbortSignal | undefined;
  resolve(result: StepResult): void;
  reject(err: unknown): void;
}

/** The next turn of the event loop where there is one (Node's setImmediate), else the end of this task. */
const immediate = (globalThis as { setImmediate?: (f: () => void) => unknown }).setImmediate;
const nextTurn: (f: () => void) => void = typeof immediate === 'function' ? (f) => void immediate(f) : queueMicrotask;

/** A store in Redis (over TCP or Upstash's HTTP): each decision is one Lua script run by EVALSHA, timed by Redis TIME; decisions of one turn are batched into one call. */
export function redisStore(options: RedisStoreOptions): Store {
  if (!options || typeof options !== 'object' || !options.client) throw new ConfigError('client', 'is required');
  const { client, abortable } = adapt(options.client);
  const clientClock = options.clientClock === true;
  if (options.nowMs !== undefined && !clientClock) throw new ConfigError('nowMs', 'only applies with clientClock: true');
  const nowMs = options.nowMs ?? Date.now;
  const maxBatch = options.batch === false ? 1 : options.batch?.maxSize ?? 64;
  if (!Number.isInteger(maxBatch) || maxBatch < 1 || maxBatch > 1000) {
    throw new ConfigError('batch.maxSize', `must be an integer from 1 to 1000, got ${String(maxBatch)}`);
  }
  const slotOf = isCluster(options.client) ? keySlot : () => 0;
  const sendAloneWhenIdle = isTcpClient(options.client);

  async function run(script: string, sha: string, keys: string[], args: string[], signal?: AbortSignal): Promise<unknown> {
    try {
      return await client.evalsha(sha, keys, args, signal);
    } catch (err) {
      // Script cache flushed (restart, failover, SCRIPT FLUSH): load it by running it once with EVAL.
      if (!/NOSCRIPT/i.test(message(err)) || signal?.aborted) throw err;
      return await client.eval(script, keys, args, signal);
    }
  }

  /** The clock sent in client-clock mode, as whole µs; undefined when the server's clock decides. */
  const sentNow = (): number | undefined => (clientClock ? Math.round(nowMs() * 1000) : undefined);

  async function stepOne(key: string, args: StepArgs, signal?: AbortSignal): Promise<StepResult> {
    const { limits } = args;
    const grant = !args.adjust && args.tokenUnits !== undefined;
    if (grant && limits.length !== 1) throw new StoreError('redis', `a partial grant (tokenUnits) is for one limit, got ${limits.length}`);
    const sentNowUs = sentNow();
    // ARGV: the clock, the kind of step and its one extra number (see GCRA_SCRIPT), then each limit's three.
    const argv = [
      sentNowUs === undefined ? '' : String(sentNowUs),
      args.adjust ? 'a' : grant ? 'g' : 't',
      args.adjust ? (args.refundSinceUs === undefined ? '' : String(args.refundSinceUs)) : grant ? String(args.tokenUnits) : '',
    ];
    let peek = true;
    for (const l of limits) {
      argv.push(String(l.costUnits), String(l.limitUnits), String(l.refillUnitsPerUs));
      if (l.costUnits !== 0) peek = false;
    }
    // A grant's reply carries the tokens taken, except for a peek (every cost 0), which takes none.
    const withTokens = grant && !peek;
    const { op } = args;
    // An operation id: its record's key (in the bucket's hash slot), its ttl and the fingerprint.
    const keys = op === undefined ? [key] : [key, opKeyOf(key, op.id)];
    if (op !== undefined) argv.push(String(op.ttlMs), op.fingerprint);
    let reply: unknown;
    try {
      reply = await run(GCRA_SCRIPT, GCRA_SCRIPT_SHA, keys, argv, signal);
    } catch (err) {
      throw scriptError(err, clientClock);
    }
    try {
      if (op !== undefined && Array.isArray(reply) && reply[0] === 'op') return repeated(args, reply[1], withTokens);
      if (!Array.isArray(reply) || reply.length < 4 || (reply[2] === -1) === withTokens) throw badReply(reply);
      const { stored, next } = storedAt(reply, 3);
      if (stored === undefined || next !== reply.length) throw badReply(reply);
      return resultOf(args, reply[0], nowOf(reply[1], sentNowUs), stored, withTokens ? reply[2] : undefined);
    } catch (err) {
      throw new StoreError('redis', message(err), { cause: err });
    }
  }

  /** Sends one batch; its I/O is aborted only when every decision in it has been given up on. */
  async function flush(batch: Pending[]): Promise<void> {
    if (batch.length === 1) {
      const p = batch[0]!;
      return stepOne(p.key, p.args, p.signal).then(p.resolve, p.reject);
    }
    const controller = abortable ? new AbortController() : undefined;
    let live = batch.length;
    for (const p of batch) {
      if (!p.signal || !controller) continue;
      const onAbort = () => {
        if (--live === 0) controller.abort(p.signal!.reason);
      };
      if (p.signal.aborted) onAbort();
      else p.signal.addEventListener('abort', onAbort, { once: true });
    }
    const keys = batch.map((p) => p.key);
    const sentNowUs = sentNow();
    // ARGV: the clock, then per key its number of limits and each limit's three (see GCRA_BATCH_SCRIPT).
    const argv: string[] = [sentNowUs === undefined ? '' : String(sentNowUs)];
    for (const p of batch) {
      const { limits } = p.args;
      argv.push(String(limits.length));
      for (const l of limits) argv.push(String(l.costUnits), String(l.limitUnits), String(l.refillUnitsPerUs));
    }
    let reply: unknown;
    try {
      reply = await run(GCRA_BATCH_SCRIPT, GCRA_BATCH_SCRIPT_SHA, keys, argv, controller?.signal);
    } catch (err) {
      const e = scriptError(err, clientClock);
      for (const p of batch) p.reject(e);
      return;
    }
    // Each key's part: its verdict, then its stored value (see storedAt).
    const parts: { verdict: unknown; stored: number[] | string | null | undefined }[] = [];
    if (Array.isArray(reply)) {
      for (let i = 1; i < reply.length && parts.length < batch.length; ) {
        const { stored, next } = storedAt(reply, i + 1);
        parts.push({ verdict: reply[i], stored });
        i = next;
        if (parts.length === batch.length && i !== reply.length) parts.push({ verdict: undefined, stored: undefined });
      }
    }
    if (!Array.isArray(reply) || parts.length !== batch.length || parts.some((p) => p.stored === undefined)) {
      const e = new StoreError('redis', `unexpected batch reply of ${Array.isArray(reply) ? reply.length : typeof reply} items for ${batch.length} keys`);
      for (const p of batch) p.reject(e);
      return;
    }
    const now = nowOf(reply[0], sentNowUs);
    batch.forEach((p, i) => {
      try {
        p.resolve(resultOf(p.args, parts[i]!.verdict, now, parts[i]!.stored));
      } catch (err) {
        p.reject(new StoreError('redis', message(err), { cause: err }));
      }
    });
  }

  // Decisions waiting for the next flush, by hash slot (one group when not a cluster), and the script
  // calls in flight: only while one is in flight is it worth waiting for company.
  let waiting = new Map<number, Pending[]>();
  let scheduled = false;
  let inFlight = 0;
  // Pipelining over TCP. A batch's reply releases its callers together, and they ask again within one
  // turn; were all of them to wait for the turn's end, Redis would sit idle while this process works
  // and the other way round. So while fewer than two calls are in flight, a group that reaches half of
  // what the previous turn gathered (at least EARLY_MIN) is sent at once and the rest follow at the
  // turn's end. Measured at concurrency 16-64 (bench/PROFILES.md): 1.5-1.7x rate-limiter-flexible,
  // against 0.9-1.1x when every group waited for the turn.
  const EARLY_MIN = 8;
  let gathered = 0;
  let earlyAt = Infinity;
  const done = () => {
    inFlight--;
  };
  const send = (batch: Pending[]) => {
    inFlight++;
    void flush(batch).then(done, done);
  };
  function flushAll(): void {
    earlyAt = sendAloneWhenIdle ? Math.max(EARLY_MIN, gathered >> 1) : Infinity;
    gathered = 0;
    scheduled = false;
    const groups = waiting;
    waiting = new Map();
    for (const batch of groups.values()) send(batch);
  }

  return {
    name: 'redis',
    step(key: string, args: StepArgs, options?: StepOptions): Promise<StepResult> {
      const signal = abortable ? options?.signal : undefined;
      // Lease grants, refunds and adjustments are rare (one per lease, per correction) and take the
      // single-key script's other kinds of step; the batch script takes only takes (and peeks).
      if (maxBatch === 1 || args.adjust || args.tokenUnits !== undefined || args.op !== undefined) return stepOne(key, args, signal);
      if (sendAloneWhenIdle && inFlight === 0 && !scheduled) {
        // Nothing to wait for: send it now, the cheapest way.
        inFlight++;
        const alone = stepOne(key, args, signal);
        alone.then(done, done);
        return alone;
      }
      return new Promise<StepResult>((resolve, reject) => {
        const pending: Pending = { key, args, signal, resolve, reject };
        const slot = slotOf(key);
        let group = waiting.get(slot);
        if (!group) waiting.set(slot, (group = []));
        group.push(pending);
        gathered++;
        if (group.length >= maxBatch || (inFlight < 2 && group.length >= earlyAt)) {
          waiting.delete(slot);
          send(group);
        } else if (!scheduled) {
          scheduled = true;
          nextTurn(flushAll);
        }
      });
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
