// Durable Object store (Cloudflare Workers, no external service). Buckets live in Durable Objects of the
// exported class RateLimiterObject; each step is one request to the object that owns the key, which runs
// the pure GCRA step (core/gcra.ts) against its own clock. An object handles one event at a time and
// its storage is transactional, so every step is atomic; one object's clock decides a bucket, so the
// callers' skew cannot matter.
//
// Key -> object: one object per key by default (`idFromName(key)`), or `shards: N` objects by a hash of
// the key. See docs/stores.md ("Durable Objects") and docs/benchmarks.md for the measurement behind the default.
//
// Nothing here imports `cloudflare:workers`: the class uses the fetch handler, so this module also loads
// (and type-checks) outside workerd.
import { CALLER_LAG_US, chargedUnitsOf, fullAfterMs, repeatOf, settledArgs, step, type BucketState, type OpRecord } from '../core/gcra.js';
import { applyOverride, keepUntilUs, stepBaseNumbers, stepWithRecord, type OverrideWrites } from '../core/override.js';
import { ConfigError, StoreError } from '../errors.js';
import type { OverrideArgs, OverrideLimit, OverrideRecord, OverrideResult, StepArgs, StepOptions, StepResult, Store } from '../store.js';

/** The part of a DurableObjectNamespace binding the store uses. */
export interface DurableObjectNamespaceLike {
  idFromName(name: string): unknown;
  get(id: never): { fetch(input: string, init?: RequestInit): Promise<Response> };
}

/** The part of DurableObjectState the class uses (its transactional key-value storage and alarm). */
export interface DurableObjectStateLike {
  storage: {
    get<T>(key: string): Promise<T | undefined>;
    put(key: string, value: unknown): Promise<void>;
    delete(key: string): Promise<boolean>;
    list<T>(options?: { limit?: number; start?: string }): Promise<Map<string, T>>;
    getAlarm(): Promise<number | null>;
    setAlarm(scheduledTimeMs: number): Promise<void>;
  };
}

/** Options of durableObjectStore: the RateLimiterObject namespace binding, and optional sharding of keys onto objects. */
export interface DurableObjectStoreOptions {
  /** The binding of RateLimiterObject, e.g. `env.LIMITER_DO` (wrangler.toml `[[durable_objects.bindings]]`). */
  namespace: DurableObjectNamespaceLike;
  /**
   * How keys map to objects: absent (the default), one object per key; a number from 1 to 65536, that
   * many objects, each holding the keys whose hash falls on it. Changing it moves keys to other objects,
   * which starts their buckets full.
   */
  shards?: number;
}

/** The wire format between the store and the object: one JSON body per request. */
type ObjectRequest = { op: 'step'; key: string; args: StepArgs } | { op: 'override'; key: string; args: OverrideArgs } | { op: 'reset'; key: string } | { op: 'ping' };

/** FNV-1a over UTF-16 code units: a stable, fast, well-spread hash for choosing a shard. */
function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A store in Cloudflare Durable Objects (RateLimiterObject, exported by your Worker): each decision is one request to the object that owns the key, timed by its clock. */
export function durableObjectStore(options: DurableObjectStoreOptions): Store {
  if (!options || typeof options !== 'object' || !options.namespace || typeof options.namespace.idFromName !== 'function') {
    throw new ConfigError('namespace', 'must be a Durable Object namespace binding of RateLimiterObject (e.g. env.LIMITER_DO)');
  }
  const { namespace, shards } = options;
  if (shards !== undefined && (!Number.isInteger(shards) || shards < 1 || shards > 65536)) {
    throw new ConfigError('shards', `must be an integer from 1 to 65536, got ${String(shards)}`);
  }
  const objectName = shards === undefined ? (key: string) => key : (key: string) => `shard:${fnv1a(key) % shards}`;

  async function send(objectKey: string, body: ObjectRequest, signal?: AbortSignal): Promise<unknown> {
    let res: Response;
    try {
      const stub = namespace.get(namespace.idFromName(objectName(objectKey)) as never);
      res = await stub.fetch('https://rate-limiter-object/', { method: 'POST', body: JSON.stringify(body), ...(signal ? { signal } : {}) });
    } catch (err) {
      throw new StoreError('durable-object', `request failed: ${message(err)}`, { cause: err });
    }
    const text = await res.text();
    if (!res.ok) throw new StoreError('durable-object', `object answered ${res.status}: ${text.slice(0, 200)}`);
    return text ? JSON.parse(text) : undefined;
  }

  return {
    name: 'durable-object',
    async step(key: string, args: StepArgs, stepOptions?: StepOptions): Promise<StepResult> {
      const r = (await send(key, { op: 'step', key, args }, stepOptions?.signal)) as StepResult;
      if (!r || typeof r.allowed !== 'boolean' || !Array.isArray(r.debtUnits) || (r.debtUnits.length !== args.limits.length && r.unknownCharge !== true)) throw new StoreError('durable-object', `unexpected answer ${JSON.stringify(r)?.slice(0, 100)}`);
      return r;
    },
    async reset(key: string): Promise<void> {
      await send(key, { op: 'reset', key });
    },
    async override(key: string, args: OverrideArgs, stepOptions?: StepOptions): Promise<OverrideResult> {
      const r = (await send(key, { op: 'override', key, args }, stepOptions?.signal)) as OverrideResult;
      if (!r || typeof r.atUs !== 'number') throw new StoreError('durable-object', `unexpected answer ${JSON.stringify(r)?.slice(0, 100)}`);
      return r;
    },
    async ping(): Promise<void> {
      await send('ping', { op: 'ping' });
    },
  };
}

const MAX_KEY_BYTES = 2048;
const MAX_ALARM_DELAY_MS = 30 * 24 * 3600 * 1000;

/**
 * A stored entry: the bucket's state (core/gcra.ts BucketState; absent: full), the key's override record
 * beside it (absent: none), and when the entry holds nothing any more, in ms since the epoch (the alarm
 * deletes it then): the bucket full again, the record's numbers and block ended.
 */
interface StoredBucket extends Partial<BucketState> {
  fullAtMs: number;
  override?: OverrideRecord;
}

/** A stored bucket's state; one written with a single debt (a number) reads as that one limit. */
function readState(stored: (Omit<StoredBucket, 'debtUnits'> & { debtUnits?: readonly number[] | number }) | undefined): BucketState | undefined {
  if (stored?.debtUnits === undefined) return undefined;
  if (typeof stored.debtUnits !== 'number') return stored as BucketState;
  const state: BucketState = { debtUnits: [stored.debtUnits], atUs: stored.atUs! };
  return stored.reservedUntilUs === undefined ? state : { ...state, reservedUntilUs: stored.reservedUntilUs };
}

/** An entry to store (undefined: delete it) for a bucket and a record beside it; `base` reckons when it holds nothing. */
function entryOf(bucket: BucketState | undefined, record: OverrideRecord | undefined, base: readonly OverrideLimit[], pinned = false, holdUntilUs = 0): StoredBucket | undefined {
  if (bucket === undefined && record === undefined) return undefined;
  const untilUs = keepUntilUs(bucket, base, record, pinned, holdUntilUs);
  // Numbers with no end keep the entry: the alarm re-arms every 30 days and finds it still live.
  const fullAtMs = untilUs === Infinity ? Number.MAX_SAFE_INTEGER : Math.ceil(untilUs / 1000);
  const reserved = bucket?.reservedUntilUs === undefined ? {} : { reservedUntilUs: bucket.reservedUntilUs };
  return { ...(bucket ? { debtUnits: bucket.debtUnits, atUs: bucket.atUs, ...reserved } : {}), fullAtMs, ...(record ? { override: record } : {}) };
}

/** Whether `v` is a list of `n` limits' numbers (positive integers). */
function isNumbers(v: unknown, n?: number): v is OverrideLimit[] {
  const positive = (x: unknown) => typeof x === 'number' && Number.isSafeInteger(x) && x > 0;
  return Array.isArray(v) && v.length > 0 && (n === undefined || v.length === n) && v.every((l: OverrideLimit) => l && positive(l.tokenUnits) && positive(l.capacityUnits) && positive(l.refillUnitsPerUs));
}

/** Whether `v` is a wait in ms from now (a non-negative integer). */
const isMs = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
/** The longest StepArgs.policyHoldMs a step may ask for: the longest policyRefreshMs and timeoutMs, with room. */
const MAX_HOLD_MS = 86_400_000;

/** Whether a step's or an override's view of the policy-wide change (StepArgs.policy, .policySeenUs, .policyHoldMs) is well formed, for n limits. */
const viewOk = (a: Pick<StepArgs, 'policy' | 'policySeenUs' | 'policyHoldMs'>, n: number) =>
  (a.policy === undefined || (typeof a.policy?.id === 'string' && isNumbers(a.policy.limits, n) && (a.policy.untilUs === undefined || isMs(a.policy.untilUs)))) &&
  (a.policySeenUs === undefined || isMs(a.policySeenUs)) &&
  (a.policyHoldMs === undefined || (isMs(a.policyHoldMs) && a.policyHoldMs <= MAX_HOLD_MS));

/**
 * The Durable Object class that holds buckets. Export it from your Worker's main module and bind it
 * (see wrangler.toml). Each bucket is one storage entry, key -> { debtUnits, atUs, fullAtMs } (see
 * core/gcra.ts); a full bucket has no entry. An alarm deletes entries whose buckets have refilled, so
 * idle keys cost no storage.
 */
export class RateLimiterObject {
  private readonly storage: DurableObjectStateLike['storage'];
  /** The alarm time this object has set, so a write re-arms only when it must. */
  private alarmAtMs: number | null | undefined;

  constructor(state: DurableObjectStateLike, _env?: unknown) {
    this.storage = state.storage;
  }

  async fetch(request: Request): Promise<Response> {
    let body: ObjectRequest;
    try {
      body = (await request.json()) as ObjectRequest;
    } catch {
      return new Response('body must be JSON', { status: 400 });
    }
    if (body.op === 'ping') return Response.json({ ok: true });
    if (typeof body.key !== 'string' || body.key.length === 0 || body.key.length > MAX_KEY_BYTES) return new Response('key must be a non-empty string', { status: 400 });
    if (body.op === 'reset') {
      // The bucket goes; a record beside it stays, as long as it holds the key with no bucket
      // (keepUntilUs: a spent bucket had kept a key's own numbers with an end until its next step).
      const o = (await this.storage.get<StoredBucket>(body.key))?.override;
      if (o === undefined) await this.storage.delete(body.key);
      else await this.storage.put(body.key, entryOf(undefined, o, [])!);
      return Response.json({ ok: true });
    }
    if (body.op === 'override') return this.override(body.key, body.args);
    const { args } = body;
    if (
      body.op !== 'step' ||
      !args ||
      !Array.isArray(args.limits) ||
      args.limits.length === 0 ||
      !args.limits.every((l) => l && typeof l.costUnits === 'number' && typeof l.limitUnits === 'number' && l.refillUnitsPerUs > 0) ||
      (args.tokenUnits !== undefined && !(args.tokenUnits > 0 && args.limits.length === 1)) ||
      (args.refundSinceUs !== undefined && typeof args.refundSinceUs !== 'number') ||
      (args.op !== undefined && !(typeof args.op?.id === 'string' && args.op.id.length > 0 && args.op.ttlMs > 0 && typeof args.op.fingerprint === 'string')) ||
      (args.settle !== undefined && !(args.op !== undefined && typeof args.settle?.chargeId === 'string')) ||
      (args.base !== undefined && !(isMs(args.base?.maxWaitMs) && isNumbers(stepBaseNumbers(args.limits, args.base), args.limits.length) && args.base.tokenUnits.length === args.limits.length)) ||
      !viewOk(args, args.limits.length)
    ) {
      return new Response('unknown operation', { status: 400 });
    }
    // This object's clock is the bucket's clock, read in whole µs. The event runs alone (input gates),
    // so this read-decide-write is atomic, and the answer waits until the write is durable (output gates).
    const nowMs = Date.now();
    // An operation id's record is an entry of its own beside the bucket's, deleted by the alarm once
    // it expires (its fullAtMs is its expiry).
    // It starts with "op" and NUL, which no bucket key does (a bucket key starts with the limiter's prefix,
    // which holds no NUL, or a policy name), and holds the key's length, so no two (key, id) share one.
    const opKeyOf = (id: string) => `op\u0000${body.key.length}:${body.key}${id}`;
    const opKey = args.op === undefined ? undefined : opKeyOf(args.op.id);
    const live = async (key: string) => {
      const seen = await this.storage.get<{ record: OpRecord; fullAtMs: number }>(key);
      return seen !== undefined && seen.fullAtMs > nowMs ? seen.record : undefined;
    };
    if (opKey !== undefined) {
      const seen = await live(opKey);
      if (seen !== undefined) return Response.json(repeatOf(seen, args));
    }
    // A settlement: what its charge took, from the charge's record (live, and a take's).
    const charged = args.settle === undefined ? undefined : (await live(opKeyOf(args.settle.chargeId)))?.chargedUnits;
    if (args.settle !== undefined && charged === undefined) return Response.json({ allowed: false, debtUnits: [], unknownCharge: true } satisfies StepResult);
    const stored = await this.storage.get<StoredBucket>(body.key);
    const record = stored?.override;
    const stepped = charged === undefined ? args : settledArgs(args, charged);
    const r: StepResult & OverrideWrites = stepWithRecord(readState(stored), nowMs * 1000, stepped, record);
    if (record !== undefined || r.writeRecord !== undefined) {
      if (r.write !== undefined || r.writeRecord !== undefined) {
        // Without StepArgs.base a record holds only a block (stepWithRecord refuses numbers without it), and
        // only the refill counts for when the entry holds nothing.
        const base = args.base ? stepBaseNumbers(args.limits, args.base) : args.limits.map((l) => ({ tokenUnits: 1, capacityUnits: 1, refillUnitsPerUs: l.refillUnitsPerUs }));
        const entry = entryOf(r.write === undefined ? readState(stored) : r.write ?? undefined, r.writeRecord === undefined ? record : r.writeRecord ?? undefined, base, false, (nowMs + (args.policyHoldMs ?? 0)) * 1000);
        if (entry === undefined) await this.storage.delete(body.key);
        else {
          await this.storage.put(body.key, entry);
          await this.armAlarm(entry.fullAtMs);
        }
      }
    } else if (r.write) {
      // Full again, but not before a reservation's caller may come (core CALLER_LAG_US after its slot).
      const h = r.write.reservedUntilUs;
      const fullAtMs = Math.max(nowMs + Math.max(...r.write.debtUnits.map((d, i) => fullAfterMs(d, args.limits[i]!.refillUnitsPerUs))), h === undefined ? 0 : Math.ceil((h + CALLER_LAG_US) / 1000));
      await this.storage.put(body.key, { debtUnits: r.write.debtUnits, atUs: r.write.atUs, ...(r.write.reservedUntilUs === undefined ? {} : { reservedUntilUs: r.write.reservedUntilUs }), fullAtMs });
      await this.armAlarm(fullAtMs);
    } else if (r.write === null) {
      await this.storage.delete(body.key);
    }
    const out: StepResult =
      r.tokens === undefined ? { allowed: r.allowed, debtUnits: r.debtUnits, atUs: r.atUs } : { allowed: r.allowed, debtUnits: r.debtUnits, tokens: r.tokens, atUs: r.atUs };
    if (r.limits !== undefined) out.limits = r.limits;
    if (r.blockedUntilUs !== undefined) out.blockedUntilUs = r.blockedUntilUs;
    if (opKey !== undefined) {
      const record: OpRecord = { ...out, atUs: nowMs * 1000, fingerprint: args.op!.fingerprint };
      if (charged !== undefined) record.chargedUnits = charged;
      else if (!args.adjust) record.chargedUnits = chargedUnitsOf(args, r);
      const expiresAtMs = nowMs + args.op!.ttlMs;
      await this.storage.put(opKey, { record, fullAtMs: expiresAtMs });
      await this.armAlarm(expiresAtMs);
    }
    return Response.json(out);
  }

  /** Store.override on the key's entry: applyOverride at this object's clock, the bucket and record written together. */
  private async override(key: string, args: OverrideArgs): Promise<Response> {
    if (
      !args ||
      !isNumbers(args.base) ||
      (args.limits !== undefined && args.limits !== null && !isNumbers(args.limits, args.base.length)) ||
      (args.forMs !== undefined && !isMs(args.forMs)) ||
      (args.blockForMs !== undefined && args.blockForMs !== null && !isMs(args.blockForMs)) ||
      (args.policyId !== undefined && typeof args.policyId !== 'string') ||
      !viewOk(args, args.base.length)
    ) {
      return new Response('unknown operation', { status: 400 });
    }
    const nowMs = Date.now();
    const stored = await this.storage.get<StoredBucket>(key);
    const r = applyOverride(readState(stored), stored?.override, nowMs * 1000, args);
    if (r.write !== undefined || r.writeRecord !== undefined) {
      const entry = entryOf(r.write === undefined ? readState(stored) : r.write ?? undefined, r.writeRecord === undefined ? stored?.override : r.writeRecord ?? undefined, args.base, args.limits !== undefined && args.policyId !== undefined, (nowMs + (args.policyHoldMs ?? 0)) * 1000);
      if (entry === undefined) await this.storage.delete(key);
      else {
        await this.storage.put(key, entry);
        await this.armAlarm(entry.fullAtMs);
      }
    }
    const { write: _w, writeRecord: _r, ...result } = r;
    return Response.json(result);
  }

  /** Deletes the entries of buckets that are full again, and re-arms for the latest one still draining. */
  async alarm(): Promise<void> {
    const now = Date.now();
    this.alarmAtMs = null;
    let latest = 0;
    let start: string | undefined;
    for (;;) {
      const page = await this.storage.list<StoredBucket>({ limit: 512, ...(start === undefined ? {} : { start }) });
      let last: string | undefined;
      for (const [k, bucket] of page) {
        if (k === start) continue;
        last = k;
        const fullAtMs = bucket?.fullAtMs;
        if (typeof fullAtMs !== 'number' || fullAtMs <= now) await this.storage.delete(k);
        else latest = Math.max(latest, fullAtMs);
      }
      if (last === undefined || page.size < 512) break;
      start = last;
    }
    if (latest > 0) await this.armAlarm(latest);
  }

  private async armAlarm(atMs: number): Promise<void> {
    if (this.alarmAtMs === undefined) this.alarmAtMs = await this.storage.getAlarm();
    // One alarm is enough while one is set: when it fires it re-arms for whatever is still draining.
    if (this.alarmAtMs !== null) return;
    // Far-future times are refused by the runtime (a bucket may take up to 31,700 years to refill):
    // wake up at least every 30 days and re-arm then.
    this.alarmAtMs = Math.ceil(Math.min(atMs, Date.now() + MAX_ALARM_DELAY_MS));
    await this.storage.setAlarm(this.alarmAtMs);
  }
}
