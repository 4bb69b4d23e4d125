// The Redis scripts called by another client with malformed arguments, straight over EVALSHA and EVAL
// to a real redis-server: each call gets an error reply within a second, writes nothing, and leaves
// the server answering PING. At 047ecb0 a batch whose count of limits did not match its ARGV (10^9 with
// one triple, on a key that holds a value) built a pattern of that many captures with string.rep: the
// server answered nothing for minutes and took gigabytes, so this file's server runs with its address
// space capped (a script that allocates without bound fails for want of memory, not the machine).
import { Redis as IORedis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawCommand, startRedis, type RedisProcess } from '../scripts/lib/redis-server.js';
import { MAX_LIMITS } from '../src/core/policy.js';
import { GCRA_BATCH_SCRIPT, GCRA_BATCH_SCRIPT_SHA, GCRA_SCRIPT, GCRA_SCRIPT_SHA } from '../src/stores/redis-script.js';
import { OVERRIDE_SCRIPT, OVERRIDE_SCRIPT_SHA } from '../src/stores/redis-override.js';

let redis: RedisProcess;
let admin: IORedis;
beforeAll(async () => {
  redis = await startRedis({ addressSpaceMiB: 512 });
  admin = new IORedis(redis.url);
  expect(await admin.script('LOAD', GCRA_SCRIPT)).toBe(GCRA_SCRIPT_SHA);
  expect(await admin.script('LOAD', GCRA_BATCH_SCRIPT)).toBe(GCRA_BATCH_SCRIPT_SHA);
  expect(await admin.script('LOAD', OVERRIDE_SCRIPT)).toBe(OVERRIDE_SCRIPT_SHA);
});
afterAll(async () => {
  admin?.disconnect();
  await redis?.stop();
});

/** A value of one limit, as the scripts write it: what a key that was taken from holds. */
const HELD = '5:1700000000000000';
/** HELD with numbers of its own (an override record, no end): a key whose step reads the base. */
const RECORDED = '5:1700000000000000|1,20,1|||';
/** HELD under a copy of the policy-wide change "5.p": a key whose step reads ARGV[5] too. */
const COPIED = '5:1700000000000000|1,20,1|||5.p';
const LIMIT = ['1', '10', '1'];
/** No base and no policy-wide change: ARGV[4] and ARGV[5] are "". */
const take = (...limits: string[][]) => ['', 't', '', '', '', ...limits.flat()];
/** A batch key's ARGV: its count (entry 0: no base and no policy-wide change) and its triples. */
const key = (...limits: string[][]) => [String(limits.length), ...limits.flat()];

/** [what, KEYS, ARGV]: the batch script's. Every key named k* holds HELD before each call. */
const BATCH: [string, string[], string[]][] = [
  ['a count of 10^9 with one triple (the hang at 047ecb0)', ['k1'], ['', '1000000000', ...LIMIT]],
  ['a count of 2^31 - 1 with one triple', ['k1'], ['', '2147483647', ...LIMIT]],
  [`a count of ${MAX_LIMITS + 1} (above MAX_LIMITS) with as many triples`, ['k1'], ['', String(MAX_LIMITS + 1), ...Array(MAX_LIMITS + 1).fill(LIMIT).flat()]],
  ['a count of 16 (0 limits, entry 1) with a triple and an entry', ['k1'], ['', '16', ...LIMIT, '0,1,10', '']],
  ['a count of 10^6 + 1', ['k1'], ['', '1000001', ...LIMIT]],
  ['a count of 2 with one triple', ['k1'], ['', '2', ...LIMIT]],
  ['a count of 0', ['k1'], ['', '0']],
  ['a count of -1 before a second key', ['k1', 'k2'], ['', '-1', ...LIMIT, ...key(LIMIT)]],
  ['a count of -15 (1 limit, entry -1)', ['k1'], ['', '-15', ...LIMIT]],
  ['a count of 1.5', ['k1'], ['', '1.5', ...LIMIT, ...LIMIT]],
  ['a count of inf', ['k1'], ['', 'inf', ...LIMIT]],
  ['a count of nan', ['k1'], ['', 'nan', ...LIMIT]],
  ['a count that is not a number', ['k1'], ['', 'one', ...LIMIT]],
  ['the second key without its count', ['k1', 'k2'], ['', ...key(LIMIT)]],
  ['entry 1 without its base and policy', ['k1'], ['', '17', ...LIMIT]],
  ['entry 2 with one entry', ['k1', 'k2'], ['', '17', ...LIMIT, '33', ...LIMIT, '0,1,10', '']],
  ['an entry no key names', ['k1'], ['', '1', ...LIMIT, '0,1,10', '']],
  ['no ARGV at all', ['k1'], []],
  ['an ARGV after the last key', ['k1'], ['', ...key(LIMIT), '1']],
  ['a cost that is not a number', ['k1'], ['', ...key(['x', '10', '1'])]],
  ['an empty limitUnits', ['k1'], ['', ...key(['1', '', '1'])]],
  ['a cost of nan', ['k1'], ['', ...key(['nan', '10', '1'])]],
  ['a rate of inf', ['k1'], ['', ...key(['1', '10', 'inf'])]],
  ['a limitUnits of 1e999', ['k1'], ['', ...key(['1', '1e999', '1'])]],
  ['a clock that is not a number', ['k1'], ['soon', ...key(LIMIT)]],
  ['a clock of nan', ['k1'], ['nan', ...key(LIMIT)]],
  ['a base whose tokenUnits is 0', ['k1'], ['', '17', ...LIMIT, '0,0,5', '']],
  ['a base that is not numbers', ['k1'], ['', '17', ...LIMIT, '0,1,5e3', '']],
  ['a policy with a refill of 0', ['k1'], ['', '17', ...LIMIT, '', '1,5,0|1||p']],
  ['a policy whose id holds a newline', ['k1'], ['', '17', ...LIMIT, '', '1,5,1|||p\n']],
  ['a policy without its id', ['k1'], ['', '17', ...LIMIT, '', '1,5,1|1||']],
  ['a policy whose untilUs is not digits', ['k1'], ['', '17', ...LIMIT, '', '1,5,1|soon||p']],
  ['a policy without its holdMs (the v15 form)', ['k1'], ['', '17', ...LIMIT, '', '1,5,1|1|p']],
  ['a policy whose holdMs is a day and 1 ms', ['k1'], ['', '17', ...LIMIT, '', '1,5,1||86400001|p']],
  ["a policySeenUs of 2^53 (an entry's \"!<seenUs>|<holdMs>\")", ['k1'], ['', '17', ...LIMIT, '', '!9007199254740992|']],
  ['a policySeenUs that is not digits', ['k1'], ['', '17', ...LIMIT, '0,1,10', '!soon|']],
  ['a policySeenUs without its holdMs (the v15 form)', ['k1'], ['', '17', ...LIMIT, '', '!5']],
  ['a policySeenUs of nothing', ['k1'], ['', '17', ...LIMIT, '', '!']],
  ['a policyHoldMs of a day and 1 ms', ['k1'], ['', '17', ...LIMIT, '', '!5|86400001']],
  ['a policyHoldMs of 1.5', ['k1'], ['', '17', ...LIMIT, '', '!|1.5']],
  ['a policyHoldMs of -1', ['k1'], ['', '17', ...LIMIT, '', '!5|-1']],
  ['no keys', [], ['']],
];

/**
 * [what, KEYS, ARGV, value]: the single-key script's; the keys hold `value` (default HELD). The straight-line
 * take of a key with no record reads of the base only whether maxWaitMs is "0", unless the take may wait,
 * and of ARGV[5] only whether it is a change; that of a key with numbers of its own, not ARGV[5]'s numbers.
 * So those cases are refused where the rest is read: on a key with a record, or with a copy of a
 * policy-wide change (and answered on a key with none: see the last test).
 */
const SINGLE: [string, string[], string[], string?][] = [
  ['no ARGV at all', ['k1'], []],
  ['the clock and kind only', ['k1'], ['', 't']],
  ['a limit of two numbers', ['k1'], ['', 't', '', '1', '10']],
  [`${MAX_LIMITS + 1} limits (above MAX_LIMITS)`, ['k1'], take(...Array(MAX_LIMITS + 1).fill(LIMIT))],
  ['an unknown kind', ['k1'], ['', 'x', '', '', '', ...LIMIT]],
  ['a cost that is not a number', ['k1'], take(['x', '10', '1'])],
  ['a cost of nan', ['k1'], take(['nan', '10', '1'])],
  ['a rate of -inf', ['k1'], take(['1', '10', '-inf'])],
  ['an empty limitUnits in a second limit', ['k1'], take(LIMIT, ['1', '', '1'])],
  ['a clock that is not a number', ['k1'], ['soon', 't', '', '', '', ...LIMIT]],
  ["a grant's tokenUnits of 0", ['k1'], ['', 'g', '0', '', '', ...LIMIT]],
  ["a grant without tokenUnits", ['k1'], ['', 'g', '', '', '', ...LIMIT]],
  ['a refund since a time that is not a number', ['k1'], ['', 'a', 'then', '', '', '-1', '10', '1']],
  ['a base whose capacityUnits is 0', ['k1'], ['', 't', '', '0,1,0', '', ...LIMIT], RECORDED],
  ['a base of one limit for two', ['k1'], ['', 't', '', '0,1,5', '', ...LIMIT, ...LIMIT]],
  ['a base with a wait whose capacityUnits is 0', ['k1'], ['', 't', '', '5,1,0', '', ...LIMIT]],
  ['a base with a wait and an empty field', ['k1'], ['', 't', '', '5,,5', '', ...LIMIT]],
  ['a base with a wait of two limits for one', ['k1'], ['', 't', '', '5,1,5,1,5', '', ...LIMIT]],
  ['a base with an empty field', ['k1'], ['', 't', '', '0,,5', '', ...LIMIT], RECORDED],
  ['a policy of two numbers', ['k1'], ['', 't', '', '', '1,5|||p', ...LIMIT]],
  ['a policy with a refill of 0', ['k1'], ['', 't', '', '', '1,5,0|||p', ...LIMIT]],
  ['a policy whose id holds a control character', ['k1'], ['', 't', '', '', '1,5,1|||p\u0001', ...LIMIT]],
  ['a policy of 2^53 tokenUnits', ['k1'], ['', 't', '', '', '9007199254740992,5,1|||p', ...LIMIT]],
  ['a policy without its holdMs (the v18 form)', ['k1'], ['', 't', '', '', '1,5,1||p', ...LIMIT]],
  ['a policy whose holdMs is a day and 1 ms', ['k1'], ['', 't', '', '', '1,5,1||86400001|p', ...LIMIT]],
  ['a policy whose holdMs is 1e3', ['k1'], ['', 't', '', '', '1,5,1||1e3|p', ...LIMIT]],
  ['a policySeenUs ("!<seenUs>|<holdMs>") of 2^53', ['k1'], ['', 't', '', '', '!9007199254740992|', ...LIMIT], COPIED],
  ['a policySeenUs of 1.5', ['k1'], ['', 't', '', '', '!1.5|', ...LIMIT], COPIED],
  ['a policySeenUs of -1', ['k1'], ['', 't', '', '', '!-1|', ...LIMIT], COPIED],
  ['a policySeenUs without its holdMs (the v18 form)', ['k1'], ['', 't', '', '', '!5', ...LIMIT], COPIED],
  ['a policySeenUs of nothing, in a grant', ['k1'], ['', 'g', '1', '', '!', ...LIMIT]],
  ['a policyHoldMs of a day and 1 ms', ['k1'], ['', 't', '', '', '!5|86400001', ...LIMIT], COPIED],
  ['a policyHoldMs of 10^400 (no finite number)', ['k1'], ['', 't', '', '', `!|1${'0'.repeat(400)}`, ...LIMIT], COPIED],
  ['a policyHoldMs of 1.5, in an adjustment', ['k1'], ['', 'a', '', '', '!|1.5', ...LIMIT]],
  ["an operation id's ttl of 0", ['k1', 'k1:op'], [...take(LIMIT), '0', 'fingerprint']],
  ["an operation id's ttl of 1.5", ['k1', 'k1:op'], [...take(LIMIT), '1.5', 'fingerprint']],
  ['an operation id without its ttl and fingerprint', ['k1', 'k1:op'], take(LIMIT)],
];

/** [what, ARGV]: the override script's (KEYS: k1). */
const OVERRIDE: [string, string[]][] = [
  ['no ARGV at all', []],
  ['seven ARGV (the count of v9)', ['', 'o', '1,10,1', '', '', '', '']],
  ['an unknown kind', ['', 'x', '1,10,1', '', '', '', '', '']],
  ['a clock that is not digits', ['soon', 'o', '1,10,1', '', '', '', '', '']],
  ['no base', ['', 'o', '', '', '', '', '', '']],
  ['a base of two numbers', ['', 'o', '1,10', '', '', '', '', '']],
  ['a base of nine limits', ['', 'o', Array(9).fill('1,10,1').join(','), '', '', '', '', '']],
  ['a base whose tokenUnits is 0', ['', 'o', '0,10,1', '', '', '', '', '']],
  ['a base of 2^53', ['', 'o', '9007199254740992,10,1', '', '', '', '', '']],
  ['numbers of another count than the base', ['', 'o', '1,10,1', '1,10,1,1,10,1', '', '', '', '']],
  ['numbers with a refill of 0', ['', 'o', '1,10,1', '1,10,0', '', '', '', '']],
  ['numbers that are not digits', ['', 'o', '1,10,1', '1,1e3,1', '', '', '', '']],
  ['a duration of 1.5 ms', ['', 'o', '1,10,1', '1,20,1', '1.5', '', '', '']],
  ['a block of -1 ms', ['', 'o', '1,10,1', '', '', '-1', '', '']],
  ['a block that is not a number', ['', 'o', '1,10,1', '', '', 'soon', '', '']],
  ['a policy id with a newline', ['', 'o', '1,10,1', '1,20,1', '', '', 'p\n', '']],
  ['a view whose change has another count of limits than the base', ['', 'o', '1,10,1', '', '', '5', '', '1,10,1,1,10,1||5|7.c']],
  ['a view whose change has a refill of 0', ['', 'o', '1,10,1', '', '', '5', '', '1,10,0||5|7.c']],
  ['a view whose change has no id', ['', 'o', '1,10,1', '', '', '5', '', '1,10,1||5|']],
  ['a view whose seenUs is 2^53', ['', 'o', '1,10,1', '', '', '5', '', '!9007199254740992|']],
  ['a view whose holdMs is a day and 1 ms', ['', 'o', '1,10,1', '', '', '5', '', '!5|86400001']],
  ['a view that is not one', ['', 'o', '1,10,1', '', '', '5', '', 'soon']],
];

/**
 * The call's outcome within one second, on a connection of its own: "error: <message>", "reply", or
 * "no answer" (a script that does not return holds the server, and with it every later command).
 */
async function within1s(command: 'EVALSHA' | 'EVAL', script: string, keys: string[], args: string[]): Promise<string> {
  const io = new IORedis(redis.url, { commandTimeout: 1000, maxRetriesPerRequest: 0, lazyConnect: true });
  try {
    await io.connect();
    await io.call(command, script, keys.length, ...keys, ...args);
    return 'reply';
  } catch (err) {
    const message = (err as Error).message;
    return /timed out/i.test(message) ? 'no answer' : `error: ${message}`;
  } finally {
    io.disconnect();
  }
}

async function refused(command: 'EVALSHA' | 'EVAL', script: string, keys: string[], args: string[], value = HELD): Promise<string> {
  // Each key holds a value (the batch's pattern was built only for a key that held one), and no record
  // unless `value` has one.
  const held = keys.filter((k) => !k.endsWith(':op'));
  if (held.length > 0) await admin.mset(...held.flatMap((k) => [k, value]));
  await admin.del('k1:op');
  const outcome = await within1s(command, script, keys, args);
  expect(outcome).toMatch(/^error: ERR /);
  // Still answering, and nothing written.
  expect(await rawCommand(redis.port, 'PING', 1000)).toBe('+PONG');
  for (const k of held) expect(await admin.get(k)).toBe(value);
  expect(await admin.exists('k1:op')).toBe(0);
  return outcome;
}

describe('the Redis scripts refuse malformed arguments with an error, at once', () => {
  it('well-formed calls of both scripts are answered (the cases below differ from them only where named)', async () => {
    await admin.set('k1', HELD);
    expect(await within1s('EVALSHA', GCRA_BATCH_SCRIPT_SHA, ['k1', 'k2'], ['', ...key(LIMIT), ...key(LIMIT, LIMIT)])).toBe('reply');
    expect(await within1s('EVALSHA', GCRA_BATCH_SCRIPT_SHA, ['k1', 'k2'], ['', '33', ...LIMIT, '17', ...LIMIT, '0,1,10', '1,20,1|5|86400000|p', '0,1,10', ''])).toBe('reply');
    // k2 now holds the marker of the change "p", ended (the steps below, which send no base, go to k1).
    expect(await admin.get('k2')).toMatch(/^\d+:\d+\|\|\|\|p$/);
    expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k1'], take(LIMIT, LIMIT))).toBe('reply');
    expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k1', 'k1:op'], [...take(LIMIT), '1000', 'fingerprint'])).toBe('reply');
    expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k1'], ['', 'a', '', '', '', '-1', '10', '1'])).toBe('reply');
    expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k1'], ['', 't', '', '0,1,10', '!9007199254740991|86400000', ...LIMIT])).toBe('reply');
    expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k1'], ['', 't', '', '', '!|', ...LIMIT])).toBe('reply');
    expect(await within1s('EVALSHA', GCRA_BATCH_SCRIPT_SHA, ['k1', 'k2'], ['', '17', ...LIMIT, '33', ...LIMIT, '0,1,10', '!1700000000000000|', '', '!0|0'])).toBe('reply');
    expect(await within1s('EVALSHA', GCRA_BATCH_SCRIPT_SHA, ['k1', 'k2'], ['', '17', ...LIMIT, '33', ...LIMIT, '0,1,10', '!|5000', '', '!|'])).toBe('reply');
    // Installs a record (no end) on k1: the steps above, which send no base, would be refused after it.
    expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k1'], ['', 't', '', '0,1,10,1,10', '1,20,1,1,20,1|||p.q-r_s', ...LIMIT, ...LIMIT])).toBe('reply');
    expect(await within1s('EVALSHA', OVERRIDE_SCRIPT_SHA, ['k1'], ['', 'o', '1,10,1', '1,20,1', '1000', '500', 'p', ''])).toBe('reply');
    expect(await within1s('EVALSHA', OVERRIDE_SCRIPT_SHA, ['k1'], ['', 'o', '1,10,1', '-', '', '500', '', '1,5,1||120050|7.c'])).toBe('reply');
    expect(await within1s('EVALSHA', OVERRIDE_SCRIPT_SHA, ['k1'], ['', 'o', '1,10,1', '', '', '-', '', '!9007199254740991|86400000'])).toBe('reply');
    expect(await within1s('EVALSHA', OVERRIDE_SCRIPT_SHA, ['k1'], ['', 'r', '', '', '', '', '', ''])).toBe('reply');
  });

  for (const [what, keys, args] of BATCH) {
    it(`batch script: ${what}`, async () => {
      await refused('EVALSHA', GCRA_BATCH_SCRIPT_SHA, keys, args);
    });
  }
  for (const [what, keys, args, value] of SINGLE) {
    const on = value === RECORDED ? ', on a key with a record' : value === COPIED ? ', on a key with a copy of a policy-wide change' : '';
    it(`single-key script: ${what}${on}`, async () => {
      const outcome = await refused('EVALSHA', GCRA_SCRIPT_SHA, keys, args, value);
      // Refused for that argument, not for another reason the key's record gives.
      if (value !== undefined) expect(outcome).toMatch(/ARGV\[[45]\] malformed/);
    });
  }

  it('by EVAL too: the batch count of 10^9, and a single-key call of too many limits', async () => {
    await refused('EVAL', GCRA_BATCH_SCRIPT, ['k1'], ['', '1000000000', ...LIMIT]);
    await refused('EVAL', OVERRIDE_SCRIPT, ['k1'], ['', 'o', '1,10', '', '', '', '', '']);
    await refused('EVAL', GCRA_SCRIPT, ['k1'], take(...Array(MAX_LIMITS + 1).fill(LIMIT)));
  });

  it('names the malformed argument', async () => {
    await admin.set('k1', HELD);
    expect(await within1s('EVALSHA', GCRA_BATCH_SCRIPT_SHA, ['k1'], ['', '1000000000', ...LIMIT])).toBe("error: ERR edge-limiter gcra batch: ARGV[2] malformed, got '1000000000'");
    expect(await within1s('EVALSHA', GCRA_BATCH_SCRIPT_SHA, ['k1'], ['', ...key(['1', 'nan', '1'])])).toBe('error: ERR edge-limiter gcra batch: a number in ARGV is not finite');
    expect(await within1s('EVALSHA', GCRA_BATCH_SCRIPT_SHA, ['k1'], ['', '17', ...LIMIT, '0,0,5', ''])).toBe("error: ERR edge-limiter gcra batch: ARGV[6] malformed, got '0,0,5'");
    expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k1'], ['', 't'])).toBe(`error: ERR edge-limiter gcra: 2 ARGV, not 1 to ${MAX_LIMITS} limits`);
    expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k1'], ['', 'x\r\n', '', '', '', ...LIMIT])).toBe("error: ERR edge-limiter gcra: ARGV[2] malformed, got 'x??'");
    expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k1'], ['', 't', '', '', '1,5,1|||\n', ...LIMIT])).toBe("error: ERR edge-limiter gcra: ARGV[5] malformed, got '1,5,1|||?'");
    expect(await within1s('EVALSHA', OVERRIDE_SCRIPT_SHA, ['k1'], ['', 'o', '1,10,1', '1,10', '', '', '', ''])).toBe("error: ERR edge-limiter override: ARGV[4] malformed, got '1,10'");
    expect(await within1s('EVALSHA', OVERRIDE_SCRIPT_SHA, ['k1'], ['', 'o', '1,10,1', '-', '', '', '', '1,10,1|||'])).toBe("error: ERR edge-limiter override: ARGV[8] malformed, got '1,10,1|||'");
    // The count is checked before any ARGV is read (seven, as override v10 took, raised a Lua error).
    expect(await within1s('EVALSHA', OVERRIDE_SCRIPT_SHA, ['k1'], ['', 'o', '1,10,1', '1,20,1', '', '', ''])).toBe('error: ERR edge-limiter override: 7 ARGV, not 8');
  });

  for (const [what, args] of OVERRIDE) {
    it(`override script: ${what}`, async () => {
      await refused('EVALSHA', OVERRIDE_SCRIPT_SHA, ['k1'], args);
    });
  }

  it('a base or policy-wide change of a number of 2^53 or more, or of another count of limits, is refused where it is read, before anything is written: alone, the call; batched, that key alone (-2)', async () => {
    const huge = '9007199254740993';
    for (const base of [`0,${huge},10`, `0,1,${huge}`, `${huge},1,10`]) {
      await admin.set('k1', RECORDED);
      expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k1'], ['', 't', '', base, '', ...LIMIT])).toMatch(/^error: ERR edge-limiter gcra: ARGV\[4\] malformed/);
      expect(await admin.get('k1')).toBe(RECORDED);
    }
    // Batched: the key that reads it is answered -2 and nothing is written for it; the key beside it
    // (no record, no change) is decided.
    for (const entry of [[`0,${huge},10`, ''], ['0,1,10,1,10', ''], ['0,1,10,1', '']]) {
      await admin.set('k1', RECORDED);
      await admin.set('k2', HELD);
      const reply = (await admin.evalsha(GCRA_BATCH_SCRIPT_SHA, 2, 'k1', 'k2', '', '17', ...LIMIT, '1', ...LIMIT, ...entry)) as unknown[];
      expect({ entry, reply: reply.slice(1, 4) }).toEqual({ entry, reply: [-2, -1, RECORDED] });
      expect(await admin.get('k1')).toBe(RECORDED);
      expect(reply[4]).toBe(1);
    }
    // A policy-wide change is read where it would be installed: on a key with no record of its own.
    for (const entry of [['0,1,10', `${huge},20,1|||p`], ['0,1,10', '1,20,1,1,20,1|||p'], ['', '1,20,1|||p']]) {
      await admin.set('k1', HELD);
      await admin.set('k2', HELD);
      const reply = (await admin.evalsha(GCRA_BATCH_SCRIPT_SHA, 2, 'k1', 'k2', '', '17', ...LIMIT, '1', ...LIMIT, ...entry)) as unknown[];
      expect({ entry, reply: reply.slice(1, 5) }).toEqual({ entry, reply: [-2, 2, 5, 1700000000000000] });
      expect(await admin.get('k1')).toBe(HELD);
      expect(reply[5]).toBe(1);
    }
    // A key with no record takes the straight-line path, which reads no base: the base is not used.
    await admin.set('k3', HELD);
    expect(await within1s('EVALSHA', GCRA_SCRIPT_SHA, ['k3'], ['', 't', '', `0,${huge},10`, '', ...LIMIT])).toBe('reply');
  });

  it('on a key with no record, a take that does not wait reads of the base only that maxWaitMs is "0" and of ARGV[5] only that it is no change and its seenUs: the calls refused above on a key with a record or a copy of a policy-wide change are decided there as with a well-formed base and view', async () => {
    const cases = SINGLE.filter(([, , , value]) => value !== undefined);
    expect(cases).toHaveLength(8);
    for (const [what, keys, args] of cases) {
      await admin.set('k1', HELD);
      // Of a view with no change it reads the seenUs too: a bucket read before it goes to the general
      // step (which counts its refill from then), where a seenUs of 2^53 is refused.
      if (args[4] === '!9007199254740992|') {
        await expect(admin.evalsha(GCRA_SCRIPT_SHA, keys.length, ...keys, ...args)).rejects.toThrow(/ARGV\[5\] malformed/);
        continue;
      }
      const reply = (await admin.evalsha(GCRA_SCRIPT_SHA, keys.length, ...keys, ...args)) as number[];
      // A take of 1 (of 10, 1 a µs) on a debt of 5 long ago: allowed, and the value read is HELD's.
      expect({ what, allowed: reply[0], read: reply.slice(2) }).toEqual({ what, allowed: 1, read: [-1, 2, 5, 1700000000000000] });
      expect(await admin.get('k1')).toBe(`1:${reply[1]}`);
    }
  });
});
