// The Redis side of one step (see core/gcra.ts `step`), run atomically by EVALSHA.
// A bucket's value is "<debt1>:<debt2>:...:<debtN>:<atUs>": each limit's debt in its units, in the
// policy's order, at the server clock's reading atUs (whole µs), all integers below 2^53, which Lua's
// doubles hold exactly, formatted with %d (%.0f where %d would not print the same digits; an exact
// round trip either way). A bucket of one limit is
// "<debt>:<atUs>", as every earlier version wrote it. The step only adds, subtracts and multiplies
// integers (and divides with an exact floor correction), in the order core/gcra.ts does, so the script
// and the client compute the same numbers. The reply formats no number: it carries the verdict, the
// clock reading and the stored value the step read, all as integers where they are (see `read`), and
// the client redoes the step from those (core/gcra.ts `step`, in stores/redis.ts `resultOf`). Formatting
// a debt cost ~1 µs of Redis time per key; bulk strings cost the client ~4 µs per reply to decode
// (bench/PROFILES.md), integers almost nothing.
//
// Both scripts take a step's limits as ARGV triples from a base index b: limit j (1 to n) is
// ARGV[b+3j-2] costUnits (the debt it adds, cost * tokenUnits; 0: not charged, and not checked; below
// 0, in an adjustment, a refund), ARGV[b+3j-1] limitUnits (the most debt allowed after) and ARGV[b+3j]
// refillUnitsPerUs (the units one µs refills).

import { MAX_LIMITS } from '../core/policy.js';

/**
 * Lua that returns the script's refusal of malformed arguments when the local bad says which: ARGV[bad],
 * their count (bad 0) or a number that is not finite (bad -1), as Redis's error reply "ERR edge-limiter
 * <script>: ...". Another client can call a script by its SHA with any arguments, so each script checks
 * them all before it reads or writes a key, and refuses what it cannot read instead of looping on it (at
 * 047ecb0 a batch's count of limits sized a pattern that string.rep built: 10^9 held Redis for minutes
 * and took 7 GB). The numbers are checked by adding them up: Lua's arithmetic reads each as tonumber
 * does and raises its own error on one that is not a number, and the sum is finite (sum * 0 is 0) only
 * when each is: about 0.2 µs of Redis time per key of a 64-key batch, where a tonumber per ARGV took
 * 0.5 to 0.7 (the straight-line takes read the same numbers again). One refusal per script, after its
 * checks, to keep the Worker's bundle small.
 */
const refuse = (script: string) =>
  `if bad then return redis.error_reply('ERR edge-limiter ${script}: ' .. (bad == 0 and #A .. ' ARGV, not 1 to ${MAX_LIMITS} limits' or bad < 0 and 'a number in ARGV is not finite' or 'ARGV[' .. bad .. '] malformed, got ' .. (A[bad] and "'" .. string.gsub(string.sub(A[bad], 1, 32), '%c', '?') .. "'" or 'nothing'))) end`;

/** The Lua both scripts share (reading, charging and saving a bucket), so they cannot drift apart. */
const SHARED = `local format, ceil = string.format, math.ceil
` +
  // The clock in whole µs: ARGV[1], sent by the caller only in the explicit client-clock mode, or "" to
  // read TIME once.
  `local function clock()
  local now = A[1]
  if now ~= '' then return now + 0 end
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end
` +
  // The stored value v (false: no key) as numbers: the debts, then atUs, and how many there are (k;
  // 0: no key, or not numbers joined by ':', at least two: a full bucket). The usual value, n debts and
  // the clock in digits, is matched in one call and its numbers left as digit strings, which Lua's
  // arithmetic reads as tonumber does; any other is read field by field with tonumber.
  `local function fields(v, n)
  if not v then return nil, 0 end
  local pattern = '^(%d+):(%d+)$'
  if n == 2 then pattern = '^(%d+):(%d+):(%d+)$' elseif n ~= 1 then pattern = '^' .. string.rep('(%d+):', n) .. '(%d+)$' end
  local s = {string.match(v, pattern)}
  if s[1] then return s, n + 1, true end
  s = {}
  local k, j = 0, 1
  while true do
    local i = string.find(v, ':', j, true)
    local x
    if i then x = tonumber(string.sub(v, j, i - 1)) else x = tonumber(string.sub(v, j)) end
    if not x then return nil, 0 end
    k = k + 1
    s[k] = x
    if not i then break end
    j = i + 1
  end
  if k < 2 then return nil, 0 end
  return s, k, false
end
` +
  // Appends the stored value v to the reply out, after its count: 0 (no key); k and the usual value's k
  // numbers as integers, when each is below 2^53 (so that Redis replies them exactly: digit strings of at
  // most 15 digits, or a reading below 2^53); else -1 and v itself, which the client parses as the
  // script does. No table per key: a flat reply of integers is the cheapest for both sides to build and read.
  `local function read(out, v, s, k, fast)
  local j = #out
  if not v then
    out[j + 1] = 0
    return
  end
  if fast then
    out[j + 1] = k
    for i = 1, k do
      local x = s[i] + 0
      if #s[i] > 15 and not (x < 9007199254740992) then break end
      out[j + 1 + i] = x
      if i == k then return end
    end
    for i = j + 2, j + 1 + k do out[i] = nil end
  end
  out[j + 1] = -1
  out[j + 2] = v
end
` +
  // Stores the debts after a step, f[1 .. n], at now with an expiry of px ms, and returns the value stored;
  // when none is above 0 (keep false), every limit is full again and the key goes (a missing key is a
  // full bucket): returns false. The expiry is when the slowest limit is full again, but not sooner than
  // 1 s: a key kept longer is harmless (its debts have decayed to nothing by then), and the floor keeps
  // Redis's own clock, which times expiry, from outrunning a clock sent in the client-clock mode. All
  // formatted as integers: a Lua number of 1e14 or more would reach Redis as "1e+14".
  `local function save(key, v, f, n, now, px, keep)
  if not keep then
    if v then redis.call('DEL', key) end
    return false
  end
  f[n + 1] = now
` +
  // '%d' prints a whole number below 1e18 as '%.0f' does (a debt is never -0, and now > 0 rules it out
  // for the clock) in a fraction of its Redis time: glibc prints every '%.0f' through its multi-precision
  // float path (bench/redis-cost.ts). So '%d' wherever every number is whole, as the client's always are.
  `  local whole = now % 1 == 0 and now > 0 and now < 1e18
  for i = 1, n do
    local x = f[i]
    if not (x % 1 == 0 and x < 1e18 and x > -1e18) then whole = false end
  end
  local pattern
  if whole then
    pattern = '%d:%d'
    if n == 2 then pattern = '%d:%d:%d' elseif n ~= 1 then pattern = string.rep('%d:', n) .. '%d' end
  else
    pattern = '%.0f:%.0f'
    if n == 2 then pattern = '%.0f:%.0f:%.0f' elseif n ~= 1 then pattern = string.rep('%.0f:', n) .. '%.0f' end
  end
  local value = format(pattern, unpack(f, 1, n + 1))
` +
  // px is a whole number of at least 1000, or inf (a rate of 0), which '%.0f' prints as Redis refuses it.
  `  local ms = '1000'
  if px ~= 1000 then
    if px < 1e18 then ms = format('%d', px) else ms = format('%.0f', px) end
  end
  redis.call('SET', key, value, 'PX', ms)
  return value
end
` +
  // A take on the key holding v (its fields s, k), at now, of the n limits at A[b+1 ..]: all or nothing.
  // Allowed when every charged limit (cost above 0) stays within its limitUnits; then all are charged, else
  // nothing changes. Every cost 0 is a peek: nothing is written. Returns the verdict (1 or 0) and the
  // key's value after.
  `local function take(key, v, s, k, now, b, n)
  local elapsed = 0
  if k > 1 then elapsed = now - s[k] end
  local f = {0, 0}
  local wait, peek, keep = 0, true, false
  for i = 1, n do
    local j = b + 3 * i
    local c, r = A[j - 2] + 0, A[j] + 0
` +
  // The debt now, as core/gcra.ts debtAt (see debt_at in the single-key script), inlined: this loop
  // is most of a decision's Lua.
  `    local d = 0
    if k > 1 then
      if i < k then d = s[i] - elapsed * r else d = 0 - elapsed * r end
      if not (d > 0) then d = 0 end
    end
    local a = d + c
    if c ~= 0 then
      peek = false
      if c > 0 and a > A[j - 1] + 0 then return 0, v end
    end
    if a > 0 then
      keep = true
      local ms = a / (r * 1000)
      if ms > wait then wait = ms end
    end
    f[i] = a
  end
  if peek then return 1, v end
  return 1, save(key, v, f, n, now, math.max(1000, ceil(wait)), keep)
end`;

/** The most limits a take runs in straight lines (fastTake); a take of more goes through take. */
const FAST_LIMITS = 3;
const upTo = (n: number, f: (i: number) => string, sep: string) => Array.from({ length: n }, (_, i) => f(i + 1)).join(sep);
const indent = (lua: string, by: string) => lua.replaceAll('\n', `\n${by}`);
/** d1, ..., dn, at: the usual value's digit strings, as fastTake expects them. */
const fieldNames = (n: number) => `${upTo(n, (i) => `d${i}`, ', ')}, at`;
/** Declares d1 .. dn and at, and matches the stored value v against the usual one of n limits (a literal pattern). */
const usualValue = (n: number) =>
  `local ${fieldNames(n)}\nif v then ${fieldNames(n)} = string.match(v, '^${'(%d+):'.repeat(n)}(%d+)$') end`;
/** Whether the usual value's numbers x1 .. xn, y go back as the raw value, as read decides it (see read). */
const unsafe = (n: number) =>
  `${upTo(n, (i) => `(#d${i} > 15 and not (x${i} < 9007199254740992))`, ' or ')} or (#at > 15 and not (y < 9007199254740992))`;

/**
 * take, save and read's work for n limits (1 to FAST_LIMITS) on a stored value that is missing or the
 * usual "<debt1>:...:<debtN>:<atUs>", inlined by both scripts in their hot path, where a function call,
 * the tables of fields and take, and the patterns built cost more Redis time than the step itself
 * (bench/redis-cost.ts). It expects the locals key, v, now, j (the index of limit 1's costUnits in
 * ARGV) and the value's digit strings d1 .. dn and at (usualValue; nil without a key); it declares x1 ..
 * xn and y, the value's numbers, for the reply, and sets the declared allowed and after (the key's value
 * after, as take returns it), step for step as take and save do: the same arithmetic in the same order,
 * ARGV read in the same order (so a malformed one fails alike), a limit that refuses ending the step
 * (the break out of the repeat, Lua 5.1 having no goto). The property tests (test/redis-exact.test.ts)
 * drive it in both scripts against core/gcra.ts.
 */
const fastTake = (n: number) => {
  const limit = (i: number) => `local c${i}, r${i} = A[${i === 1 ? 'j' : `j + ${3 * i - 3}`}] + 0, A[j + ${3 * i - 1}] + 0
local a${i} = 0
if e then
  a${i} = x${i} - e * r${i}
  if not (a${i} > 0) then a${i} = 0 end
end
a${i} = a${i} + c${i}
if c${i} > 0 and a${i} > A[j + ${3 * i - 2}] + 0 then break end`;
  return `local ${upTo(n, (i) => `x${i}`, ', ')}, y, e
if at then
  ${upTo(n, (i) => `x${i}`, ', ')}, y = ${upTo(n, (i) => `d${i} + 0`, ', ')}, at + 0
  e = now - y
end
allowed, after = 0, v
repeat
  ${indent(upTo(n, limit, '\n'), '  ')}
  allowed = 1
` +
  // Every cost 0: a peek, nothing written.
  `  if ${upTo(n, (i) => `c${i} ~= 0`, ' or ')} then
    if ${upTo(n, (i) => `a${i} > 0`, ' or ')} then
` +
  // save's px, max(1000, ceil(the slowest refill's ms)), and its '%d' where exact.
  `      local px, ms = '1000', 1000
      ${upTo(n, (i) => `if a${i} > 0 and a${i} / (r${i} * 1000) > ms then ms = a${i} / (r${i} * 1000) end`, '\n      ')}
      if ms > 1000 then
        ms = math.ceil(ms)
        if ms < 1e18 then px = string.format('%d', ms) else px = string.format('%.0f', ms) end
      end
      if now % 1 == 0 and now > 0 and now < 1e18 and ${upTo(n, (i) => `a${i} % 1 == 0 and a${i} < 1e18 and a${i} > -1e18`, ' and ')} then
        after = string.format('${upTo(n + 1, () => '%d', ':')}', ${upTo(n, (i) => `a${i}`, ', ')}, now)
      else
        after = string.format('${upTo(n + 1, () => '%.0f', ':')}', ${upTo(n, (i) => `a${i}`, ', ')}, now)
      end
      redis.call('SET', key, after, 'PX', px)
    else
      if v then redis.call('DEL', key) end
      after = false
    end
  end
until true`;
};

export const GCRA_SCRIPT = `-- edge-limiter gcra v11
` +
  // KEYS[1]: the bucket key; its value is "<debt1>:...:<debtN>:<atUs>" (see above)
  // KEYS[2]: optional, an operation id's record key (an Idempotency-Key; in KEYS[1]'s hash slot): when it
  // exists the step is not run and its record is the reply, {"op", record}; otherwise the step
  // runs and its reply material is recorded there for ARGV[#ARGV - 1] ms, as
  // "<fingerprint>|<verdict>|<now>|<tokens>|<value read>", fields joined by a newline (the
  // fingerprint is ARGV[#ARGV])
  // ARGV[1]: nowUs from the caller, only in the explicit client-clock mode; "" reads the server clock
  // ARGV[2]: the kind of step: "t" a take, all or nothing (see take); "g" a partial grant (one limit) of
  // as many whole tokens as fit under limitUnits, at most costUnits / tokenUnits; "a" an
  // adjustment, always applied: per limit, a refund (costUnits below 0) never below no debt, a
  // charge never above limitUnits (a debt already above it is kept)
  // ARGV[3]: with "g", tokenUnits; with "a", refundSinceUs, the server clock's reading at the grant given
  // back ("": none), a refund then being what the bucket has not refilled since,
  // max(0, -costUnits - max(0, now - since) * rate); with "t", ""
  // ARGV[3j+1], ARGV[3j+2], ARGV[3j+3]: limit j's costUnits, limitUnits and refillUnitsPerUs (see above),
  // for j = 1 to n = (#ARGV - 3) / 3 (with KEYS[2], two more at the end: the record's ttl in ms and
  // the fingerprint). Every cost 0 is a peek, of any kind: read only
  // Returns {allowed, nowUs, tokens, count, ...}: the verdict, the clock reading in whole µs (TIME's, or
  // ARGV[1]), the tokens taken by a "g" that is not a peek (else -1), then the value the step read (see
  // read: 0; k and k integers; or -1 and the value)
  `local A = ARGV
local key, op = KEYS[1], KEYS[2]
local now, v
` +
  // The arguments, checked before anything is read or written (see refuse): n limits of 1 to
  // ${MAX_LIMITS}, as 3 + 3n ARGV (5 + 3n with an operation id, whose ttl is digits), a known kind, and
  // every other ARGV a finite number, where ARGV[1] and ARGV[3] may be "" (a grant's tokenUnits may not,
  // and is above 0).
  `local last = #A
if op then last = last - 2 end
local n, kind, bad = (last - 3) / 3, A[2]
if not (n >= 1 and n <= ${MAX_LIMITS} and n % 1 == 0) then bad = 0
elseif kind ~= 't' and kind ~= 'g' and kind ~= 'a' then bad = 2
elseif op and not string.match(A[last + 1], '^[1-9]%d*$') then bad = last + 1
elseif kind == 'g' and not ((tonumber(A[3]) or 0) > 0) then bad = 3
else
  local sum = 0
  if A[1] ~= '' then sum = A[1] + 0 end
  if A[3] ~= '' then sum = sum + A[3] end
  for i = 4, last, 3 do sum = sum + A[i] + A[i + 1] + A[i + 2] end
  if sum * 0 ~= 0 then bad = -1 end
end
${refuse('gcra')}
` +
  // The usual decision, in straight lines before anything else: a take of 1 to ${FAST_LIMITS} limits, no
  // operation id, and a stored value that is missing or the usual one of as many debts. It makes no
  // closure (each 'local function' below is a new one on every call), no table but the reply and builds
  // no pattern; its clock, arithmetic, writes and reply are the general path's (clock, and see fastTake).
  // Any other case falls through to the general path, with the clock and the value already read.
  `if A[2] == 't' and not op and n <= ${FAST_LIMITS} then
  now = A[1]
  if now == '' then
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
  else
    now = now + 0
  end
  v = redis.call('GET', key)
  ${upTo(
    FAST_LIMITS,
    (n) => `${n === 1 ? 'if' : 'elseif'} n == ${n} then
    ${indent(usualValue(n), '    ')}
    if not v or at then
      local j, allowed, after = 4
      ${indent(fastTake(n), '      ')}
      if not v then return {allowed, now, -1, 0} end
      if ${unsafe(n)} then return {allowed, now, -1, -1, v} end
      return {allowed, now, -1, ${n + 1}, ${upTo(n, (i) => `x${i}`, ', ')}, y}
    end`,
    '\n  ',
  )}
  end
end
${SHARED}
if not now then
  now = clock()
  if op then
` +
  // One read for both: a recorded operation answers without a step.
  `    local got = redis.call('MGET', key, op)
    if got[2] then return {'op', got[2]} end
    v = got[1]
  else
    v = redis.call('GET', key)
  end
end
local s, k, fast = fields(v, n)
` +
  // The reply, recording it first for an operation id: its material, from which the client redoes the
  // step to the same result.
  `local function reply(allowed, tokens)
  if op then
    local record = format('%s\\n%d\\n%.0f\\n%s\\n%s', A[#A], allowed, now, tokens or '', v or '')
    redis.call('SET', op, record, 'PX', A[#A - 1])
  end
  local out = {allowed, now, tokens or -1}
  read(out, v, s, k, fast)
  return out
end
if kind == 't' then return reply((take(key, v, s, k, now, 3, n))) end
` +
  // Limit i's debt now at rate r (core/gcra.ts debtAt): a limit the value lacks had none at atUs, and a
  // clock that went back (a failover to a server behind) raises the debt, as in core.
  `local function debt_at(s, k, i, now, r)
  if k < 2 then return 0 end
  local stored = 0
  if i < k then stored = s[i] end
  local d = stored - (now - s[k]) * r
  if d > 0 then return d end
  return 0
end
if kind == 'g' then
  local cost = A[4] + 0
  if cost == 0 then return reply(1) end
  local debt = debt_at(s, k, 1, now, A[6])
` +
  // The largest k <= cost / unit with debt + k * unit <= limit: the floor, corrected by one either way.
  `  local unit = A[3] + 0
  local room = A[5] - debt
  local q = math.floor(room / unit)
  if q * unit > room then q = q - 1 elseif (q + 1) * unit <= room then q = q + 1 end
  if q > cost / unit then q = cost / unit end
  if q <= 0 then return reply(0, 0) end
  local after = debt + q * unit
  save(key, v, {after}, 1, now, math.max(1000, ceil(after / (A[6] * 1000))), true)
  return reply(1, q)
end
local since = tonumber(A[3])
local f = {}
local px, peek, keep = 1000, true, false
for i = 1, n do
  local j = 3 + 3 * i
  local c, r = A[j - 2] + 0, A[j] + 0
  local d = debt_at(s, k, i, now, r)
  local a
  if c < 0 then
    peek = false
    local back = -c
    if since then
      back = back - math.max(0, now - since) * r
      if not (back > 0) then back = 0 end
    end
    a = math.max(0, d - back)
  else
    if c > 0 then peek = false end
    local limit = A[j - 1] + 0
    if d + c > limit then a = math.max(d, limit) else a = d + c end
  end
  if a > 0 then
    keep = true
    local ms = ceil(a / (r * 1000))
    if ms > px then px = ms end
  end
  f[i] = a
end
if not peek then save(key, v, f, n, now, px, keep) end
return reply(1)
`;

/** SHA1 of GCRA_SCRIPT, as Redis computes it (a test checks this against SCRIPT LOAD). */
export const GCRA_SCRIPT_SHA = '874d8f23eb81ecb0800fe9b1272ce4c30fb98b23';

// Many takes in one script call: one TIME read and one MGET, then each key's take in order, exactly
// as the single-key script's "t" (a key listed twice sees its earlier step). The whole script is
// atomic, so each key's step is too. Grants and adjustments go through the single-key script.
export const GCRA_BATCH_SCRIPT = `-- edge-limiter gcra batch v8
` +
  // KEYS[i]: the bucket keys, decided in order
  // ARGV[1]: nowUs from the caller, only in the explicit client-clock mode; "" reads the server clock
  // Then each key's take in turn, from b = 2: ARGV[b] its number of limits n, and ARGV[b+1 .. b+3n] the
  // limits (see above; every cost 0: a peek); the next key's count is at ARGV[b + 3n + 1]
  // Returns {nowUs, allowed1, count1, ..., allowed2, count2, ...}: the clock reading in whole µs (TIME's,
  // or ARGV[1]), then each key's verdict and the value its step read (see read: 0; k and k integers; or -1
  // and the value)
  `local A = ARGV
` +
  // The arguments, checked before anything is read or written (see refuse): the clock ("" or a finite
  // number), then per key a count of 1 to ${MAX_LIMITS} limits and as many triples of finite numbers, the
  // last key's ending ARGV. A count that does not match its ARGV never reaches fields, whose pattern
  // grows with it. The usual count, 1, is tried first. No key at all is refused by the MGET, before any
  // write.
  `local b, last, sum, bad = 2, #A, 0
if A[1] ~= '' then sum = A[1] + 0 end
for _ = 1, #KEYS do
  local n = A[b] + 0
  if n == 1 and b + 3 <= last then sum = sum + A[b + 1] + A[b + 2] + A[b + 3]
  elseif n >= 1 and n <= ${MAX_LIMITS} and n % 1 == 0 and b + 3 * n <= last then
    for i = b + 1, b + 3 * n, 3 do sum = sum + A[i] + A[i + 1] + A[i + 2] end
  else
    bad = b
    break
  end
  b = b + 3 * n + 1
end
if not bad then
  if b <= last then bad = b elseif sum * 0 ~= 0 then bad = -1 end
end
${refuse('gcra batch')}
${SHARED}
local now = clock()
local got = redis.call('MGET', unpack(KEYS))
` +
  // What this call wrote, by key, so that a key listed again reads its earlier step.
  `local written = {}
local out = {now}
local m = 1
b = 2
for i = 1, #KEYS do
  local key = KEYS[i]
  local v = written[key]
  if v == nil then v = got[i] end
  local n = A[b] + 0
  local allowed, after
` +
  // The usual key (1 to ${FAST_LIMITS} limits; no value, or the usual one) in straight lines, as the
  // single-key script's; any other leaves allowed nil, for the general path below.
  `  ${upTo(
    FAST_LIMITS,
    (n) => `${n === 1 ? 'if' : 'elseif'} n == ${n} then
    ${indent(usualValue(n), '    ')}
    if not v or at then
      local j = b + 1
      ${indent(fastTake(n), '      ')}
      out[m + 1] = allowed
      if not v then
        out[m + 2] = 0
        m = m + 2
      elseif ${unsafe(n)} then
        out[m + 2] = -1
        out[m + 3] = v
        m = m + 3
      else
        out[m + 2] = ${n + 1}
        ${upTo(n, (i) => `out[m + ${2 + i}] = x${i}`, '\n        ')}
        out[m + ${n + 3}] = y
        m = m + ${n + 3}
      end
    end`,
    '\n  ',
  )}
  end
  if allowed == nil then
    local s, k, fast = fields(v, n)
    allowed, after = take(key, v, s, k, now, b, n)
    out[m + 1] = allowed
    read(out, v, s, k, fast)
    m = #out
  end
  written[key] = after
  b = b + 3 * n + 1
end
return out
`;

/** SHA1 of GCRA_BATCH_SCRIPT (checked against SCRIPT LOAD by a test). */
export const GCRA_BATCH_SCRIPT_SHA = '8fd583a9205112490dd804ce6db8d3fd3fb89b88';
