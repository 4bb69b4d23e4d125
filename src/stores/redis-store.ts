// The Redis store over one client interface (./redis-client.ts's RedisScriptClient): one EVALSHA per
// decision (EVAL once after NOSCRIPT), decisions gathered into batches. Replies are read in
// ./redis-reply.ts. redisStore (./redis.ts) gives it any client it accepts; the Worker, which only ever
// has an @upstash/redis client, gives it that one alone (functions/app/store-edge.ts).
import { ConfigError, StoreError } from '../errors.js';
import type { OverrideArgs, OverrideResult } from '../core/override.js';
import type { StepArgs, StepOptions, StepResult, Store } from '../store.js';
import { closerOf, isCluster, isTcpClient, type AdaptedClient, type RedisClientLike } from './redis-client.js';
import { settledArgs } from '../core/gcra.js';
import { badReply, message, nowOf, opKeyOf, repeated, resultOf, scriptError, storedAt, unitsOf } from './redis-reply.js';
import { baseArg, policyArg } from './redis-value.js';
import { overrideOf, resetOf } from './redis-override-call.js';
import { GCRA_BATCH_SCRIPT, GCRA_BATCH_SCRIPT_SHA, GCRA_SCRIPT, GCRA_SCRIPT_SHA } from './redis-script.js';
import { keySlot } from './redis-slot.js';

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
  /**
   * The store owns the client: its `close()` (which the limiter's `close()` calls) closes the client
   * after the replies in flight arrive: `quit()` for ioredis, `close()` for the `redis` package and for
   * an adapter. Then a Node script exits once its work is done. Only for a client nothing else uses.
   * An @upstash/redis client holds no connection (nothing to close): true there is a ConfigError.
   * @default false (the caller closes the client)
   */
  closeClient?: boolean;
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

/**
 * redisStore, with the function that drives its client through one interface: ./redis-client.ts's
 * `adapt` (every client redisStore accepts) or `adaptScriptClient` (@upstash/redis and adapters only).
 */
export function createRedisStore(options: RedisStoreOptions, adaptClient: (client: RedisClientLike) => AdaptedClient): Store {
  if (!options || typeof options !== 'object' || !options.client) throw new ConfigError('client', 'is required');
  const { client, abortable } = adaptClient(options.client);
  const clientClock = options.clientClock === true;
  if (options.nowMs !== undefined && !clientClock) throw new ConfigError('nowMs', 'only applies with clientClock: true');
  const nowMs = options.nowMs ?? Date.now;
  const maxBatch = options.batch === false ? 1 : options.batch?.maxSize ?? 64;
  if (!Number.isInteger(maxBatch) || maxBatch < 1 || maxBatch > 1000) {
    throw new ConfigError('batch.maxSize', `must be an integer from 1 to 1000, got ${String(maxBatch)}`);
  }
  const slotOf = isCluster(options.client) ? keySlot : () => 0;
  const sendAloneWhenIdle = isTcpClient(options.client);
  const closeClient = options.closeClient ? closerOf(options.client) : undefined;
  if (options.closeClient && !closeClient) throw new ConfigError('closeClient', 'needs a client with close() or quit()');
  let closed: Promise<void> | undefined;

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
    // ARGV: the clock, the kind of step and its one extra number, the base and the policy-wide change
    // (see GCRA_SCRIPT), then each limit's three.
    const { op, settle } = args;
    const argv = [
      sentNowUs === undefined ? '' : String(sentNowUs),
      settle !== undefined ? 's' : args.adjust ? 'a' : grant ? 'g' : 't',
      args.adjust ? (args.refundSinceUs === undefined ? '' : String(args.refundSinceUs)) : grant ? String(args.tokenUnits) : '',
      baseArg(args.base),
      policyArg(args.policy, args.policySeenUs, args.policyHoldMs),
    ];
    let peek = true;
    for (const l of limits) {
      argv.push(String(l.costUnits), String(l.limitUnits), String(l.refillUnitsPerUs));
      if (l.costUnits !== 0) peek = false;
    }
    // A grant's reply carries the tokens taken, except for a peek (every cost 0), which takes none.
    const withTokens = grant && !peek;
    // An operation id: its record's key (in the bucket's hash slot), its ttl and the fingerprint; a
    // settlement's charge: its record's key too.
    const keys = op === undefined ? [key] : [key, opKeyOf(key, op.id)];
    if (settle !== undefined) {
      if (op === undefined) throw new StoreError('redis', 'a settlement needs its own operation id');
      keys.push(opKeyOf(key, settle.chargeId));
    }
    if (op !== undefined) argv.push(String(op.ttlMs), op.fingerprint);
    let reply: unknown;
    try {
      reply = await run(GCRA_SCRIPT, GCRA_SCRIPT_SHA, keys, argv, signal);
    } catch (err) {
      throw scriptError(err, clientClock);
    }
    try {
      if (op !== undefined && Array.isArray(reply) && reply[0] === 'op') return repeated(args, reply[1], withTokens);
      if (settle !== undefined && Array.isArray(reply) && reply[0] === 'nocharge') return { allowed: false, debtUnits: [], unknownCharge: true };
      if (!Array.isArray(reply) || reply.length < 4 || (reply[2] === -1) === withTokens) throw badReply(reply);
      const { stored, next } = storedAt(reply, 3);
      // A settlement's reply ends with its charge's units: the step is redone as the script ran it.
      if (stored === undefined || next !== reply.length - (settle === undefined ? 0 : 1)) throw badReply(reply);
      return resultOf(settle === undefined ? args : settledArgs(args, unitsOf(reply[next])), reply[0], nowOf(reply[1], sentNowUs), stored, withTokens ? reply[2] : undefined);
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
    // ARGV: the clock, then per key its number of limits plus 16 times its entry and each limit's three,
    // then each entry's base and policy-wide change (see GCRA_BATCH_SCRIPT): one per distinct pair.
    const argv: string[] = [sentNowUs === undefined ? '' : String(sentNowUs)];
    const entries: string[] = [];
    const entryOf = new Map<unknown, number>();
    // Each entry's policySeenUs, where it sends no change, and policyHoldMs (the base's entry found by
    // identity must have the step's).
    const seenOf: (number | undefined)[] = [];
    const holdOf: (number | undefined)[] = [];
    for (const p of batch) {
      const { limits, base, policy, policyHoldMs: hold } = p.args;
      const seen = policy === undefined ? p.args.policySeenUs : undefined;
      // The limiter shares one base (and one change) between the steps of a policy: found by identity first.
      let e = policy === undefined && base !== undefined ? (entryOf.get(base) ?? 0) : 0;
      if (e !== 0 && (seenOf[e] !== seen || holdOf[e] !== hold)) e = 0;
      if (e === 0 && (base !== undefined || policy !== undefined || seen !== undefined || hold !== undefined)) {
        const pair = [baseArg(base), policyArg(policy, seen, hold)] as const;
        const text = `${pair[0]}\n${pair[1]}`;
        e = entryOf.get(text) ?? 0;
        if (e === 0) {
          entries.push(...pair);
          entryOf.set(text, (e = entries.length / 2));
          seenOf[e] = seen;
          holdOf[e] = hold;
        }
        if (policy === undefined && base !== undefined) entryOf.set(base, e);
      }
      argv.push(String(limits.length + 16 * e));
      for (const l of limits) argv.push(String(l.costUnits), String(l.limitUnits), String(l.refillUnitsPerUs));
    }
    argv.push(...entries);
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
        // -2: the script refused this key alone (override numbers and no base), and wrote nothing for it.
        if (parts[i]!.verdict === -2) throw new Error('a key with override numbers needs StepArgs.base');
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

  // Every step not yet settled, queued or sent: close() waits for them before the client goes, so a
  // decision taken just before close() is decided by Redis, not refused by a closed client. Counted
  // only when the store owns the client: a store without close() pays nothing for it.
  let open = 0;
  let drained: (() => void) | undefined;
  const settled = () => {
    if (--open === 0) drained?.();
  };
  const step = (key: string, args: StepArgs, options?: StepOptions): Promise<StepResult> => {
    open++;
    const p = stepNow(key, args, options);
    p.then(settled, settled);
    return p;
  };

  return {
    name: 'redis',
    step: closeClient ? step : stepNow,
    // Forgets the bucket and keeps the key's override record (a key without one is deleted).
    reset: (key: string): Promise<void> => resetOf(run, key, sentNow(), clientClock),
    // The limiter's signal (StepOptions) goes with the script call, as a step's does.
    override: (key: string, args: OverrideArgs, options?: StepOptions): Promise<OverrideResult> => {
      const signal = abortable ? options?.signal : undefined;
      return overrideOf((script, sha, keys, argv) => run(script, sha, keys, argv, signal), key, args, sentNow(), clientClock);
    },
    async ping(): Promise<void> {
      try {
        await client.ping();
      } catch (err) {
        throw new StoreError('redis', `PING failed: ${message(err)}`, { cause: err });
      }
    },
    ...(closeClient && {
      /** Closes the client the store owns (closeClient) once, after every step queued or in flight settles: later calls wait for the same close. */
      close: (): Promise<void> =>
        (closed ??= new Promise<void>((resolve) => (open === 0 ? resolve() : (drained = resolve)))
          .then(closeClient)
          .then(
            () => undefined,
            (err: unknown) => {
              throw new StoreError('redis', `close failed: ${message(err)}`, { cause: err });
            },
          )),
    }),
  };

  function stepNow(key: string, args: StepArgs, options?: StepOptions): Promise<StepResult> {
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
  }
}
