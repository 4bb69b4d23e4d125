// The Redis side of one step (see core/gcra.ts `step`), run atomically by EVALSHA.
// A bucket's value is "<debt1>:<debt2>:...:<debtN>:<atUs>": each limit's debt in its units, in the
// policy's order, at the server clock's reading atUs (whole µs), all integers below 2^53, which Lua's
// doubles hold exactly, formatted with %d (%.0f where %d would not print the same digits; an exact
// round trip either way). A bucket of one limit is
// "<debt>:<atUs>", as every earlier version wrote it. The step only adds, subtracts and multiplies
// integers (and divides with an exact floor correction), in the order core/gcra.ts does, so the script
// and the client compute the same numbers. The reply formats no number of its own (only the stored value, written as above, is text): it carries the verdict, the
// clock reading and the stored value the step read, all as integers where they are (see `read`), and
// the client redoes the step from those (core/gcra.ts `step`, in stores/redis-reply.ts `resultOf`). Formatting
// a debt cost ~1 µs of Redis time per key; bulk strings cost the client ~4 µs per reply to decode
// (bench/PROFILES.md), integers almost nothing.
//
// Both scripts take a step's limits as ARGV triples from a base index b: limit j (1 to n) is
// ARGV[b+3j-2] costUnits (the debt it adds, cost * tokenUnits; 0: not charged, and not checked; below
// 0, in an adjustment, a refund), ARGV[b+3j-1] limitUnits (the most debt allowed after) and ARGV[b+3j]
// refillUnitsPerUs (the units one µs refills).

import { MAX_LIMITS } from '../core/policy.js';
import { FAST_LIMITS, fastTake, indent, refuse, SHARED, unsafe, upTo, usualValue } from './redis-lua.js';
import { RECORD } from './redis-record.js';
import { baseShape, batchBase, policyShape, recordTake, singleBase } from './redis-record-take.js';

export const GCRA_SCRIPT = `-- edge-limiter gcra v14
` +
  // KEYS[1]: the bucket key; its value is "<debt1>:...:<debtN>:<atUs>" (see above), or that and an
  // override record (./redis-record.ts)
  // KEYS[2]: optional, an operation id's record key (an Idempotency-Key; in KEYS[1]'s hash slot): when it
  // exists the step is not run and its record is the reply, {"op", record}; otherwise the step
  // runs and its reply material is recorded there for ARGV[#ARGV - 1] ms, as
  // "<fingerprint>|<verdict>|<now>|<tokens>|<value read>|<charged>", fields joined by a newline (the
  // fingerprint is ARGV[#ARGV]); <charged> is, for a take or grant, "c" and the units it charged each
  // limit (its ARGV costs; a grant's tokens times tokenUnits), joined by ':' (0 each when refused), for
  // a settlement "s" and those of its charge, and for an adjustment nothing (no sixth field)
  // KEYS[3]: with "s", the record key of the charge settled (a take's operation id, in the same slot)
  // ARGV[1]: nowUs from the caller, only in the explicit client-clock mode; "" reads the server clock
  // ARGV[2]: the kind of step: "t" a take, all or nothing (see take); "g" a partial grant (one limit) of
  // as many whole tokens as fit under limitUnits, at most costUnits / tokenUnits; "a" an
  // adjustment, always applied: per limit, a refund (costUnits below 0) never below no debt, a
  // charge never above limitUnits (a debt already above it is kept); "s" a settlement of the charge
  // recorded at KEYS[3] (always with KEYS[2]): each costUnits is the actual cost, and the step is the
  // adjustment "a" by costUnits minus what the charge took of that limit (its record's last field); no
  // such record, or not a take's: the reply is {"nocharge"}, and nothing is written
  // ARGV[3]: with "g", tokenUnits; with "a", refundSinceUs, the server clock's reading at the grant given
  // back ("": none), a refund then being what the bucket has not refilled since,
  // max(0, -costUnits - max(0, now - since) * rate); with "t", ""
  // ARGV[4]: StepArgs.base, "<maxWaitMs>,<tokenUnits1>,<capacityUnits1>,..." ("": not sent)
  // ARGV[5]: StepArgs.policy, "<t1>,<c1>,<r1>,...|<untilUs>|<id>" ("": none)
  // ARGV[3j+3], ARGV[3j+4], ARGV[3j+5]: limit j's costUnits, limitUnits and refillUnitsPerUs (see above),
  // for j = 1 to n = (#ARGV - 5) / 3 (with KEYS[2], two more at the end: the record's ttl in ms and
  // the fingerprint). Every cost 0 is a peek, of any kind: read only
  // Returns {allowed, nowUs, tokens, count, ...}: the verdict, the clock reading in whole µs (TIME's, or
  // ARGV[1]), the tokens taken by a "g" that is not a peek (else -1), then the value the step read (see
  // read: 0; k and k integers; or -1 and the value), and for "s" last the charge's units ("1:2")
  `local A = ARGV
local key, op = KEYS[1], KEYS[2]
local now, v
` +
  // The arguments, checked before anything is read or written (see refuse): n limits of 1 to
  // ${MAX_LIMITS}, as 5 + 3n ARGV (7 + 3n with an operation id, whose ttl is digits), a known kind, the
  // base and policy of their shape (see baseShape, policyShape) or "", and every other ARGV a finite
  // number, where ARGV[1] and ARGV[3] may be "" (a grant's tokenUnits may not, and is above 0).
  `local last = #A
if op then last = last - 2 end
local n, kind, bad = (last - 5) / 3, A[2]
if not (n >= 1 and n <= ${MAX_LIMITS} and n % 1 == 0) then bad = 0
elseif kind ~= 't' and kind ~= 'g' and kind ~= 'a' and not (kind == 's' and op and KEYS[3]) then bad = 2
elseif op and not string.match(A[last + 1], '^[1-9]%d*$') then bad = last + 1
elseif kind == 'g' and not ((tonumber(A[3]) or 0) > 0) then bad = 3
elseif A[4] ~= '' and not string.find(A[4], ${baseShape('n')}) then bad = 4
elseif A[5] ~= '' and not string.find(A[5], ${policyShape('n')}) then bad = 5
else
  local sum = 0
  if A[1] ~= '' then sum = A[1] + 0 end
  if A[3] ~= '' then sum = sum + A[3] end
  for i = 6, last, 3 do sum = sum + A[i] + A[i + 1] + A[i + 2] end
  if sum * 0 ~= 0 then bad = -1 end
end
${refuse('gcra')}
` +
  // The usual decision, in straight lines before anything else: a take of 1 to ${FAST_LIMITS} limits, no
  // operation id, no policy-wide change, and a stored value that is missing or the usual one of as many
  // debts (so no override record). It makes no
  // closure (each 'local function' below is a new one on every call), no table but the reply and builds
  // no pattern; its clock, arithmetic, writes and reply are the general path's (clock, and see fastTake).
  // Any other case falls through to the general path, with the clock and the value already read.
  `if A[2] == 't' and not op and n <= ${FAST_LIMITS} and A[5] == '' then
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
      local j, allowed, after = 6
      ${indent(fastTake(n), '      ')}
      if not v then return {allowed, now, -1, 0} end
      if ${unsafe(n)} then return {allowed, now, -1, -1, v} end
      return {allowed, now, -1, ${n + 1}, ${upTo(n, (i) => `x${i}`, ', ')}, y}
    end${
      n === 1
        ? `
    local j, hit, allowed, after = 6, false
    ${indent(recordTake(singleBase), '    ')}
    if hit then return {allowed, now, -1, -1, v} end`
        : ''
    }`,
    '\n  ',
  )}
  end
end
${SHARED}
${RECORD}
` +
  // The base and the policy-wide change as numbers (each below 2^53), refused before anything is written.
  `local B, P
if A[4] ~= '' then
  B = list(A[4], 2 * n + 1, 2)
  if not B then bad = 4 end
end
if A[5] ~= '' then
  local l, u, id = string.match(A[5], '^([%d,]+)|(%d*)|(%C+)$')
  P = {l = list(l, 3 * n, 1), u = tonumber(u), id = id}
  if not P.l then bad = 5 end
end
${refuse('gcra')}
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
  // A settlement: the units its charge took, from the charge's record (a take's, live), and from here on
  // the adjustment by actual - charged per limit, on a copy of ARGV (so every path below, a key's
  // override record's too, runs it as kind "a").
  `local charged = ''
if kind == 's' then
  charged = string.match(redis.call('GET', KEYS[3]) or '', '\\nc([%d:]+)$')
  if not charged then return {'nocharge'} end
  local took, copy = {}, {}
  for x in string.gmatch(charged, '%d+') do took[#took + 1] = x + 0 end
  for i = 1, #A do copy[i] = A[i] end
  for i = 1, n do copy[3 + 3 * i] = A[3 + 3 * i] - (took[i] or 0) end
  A, kind = copy, 'a'
  charged = 's' .. charged
end
` +
  // The reply, recording it first for an operation id: its material, from which the client redoes the
  // step to the same result, and what a take charged (see KEYS[2]).
  `local function reply(allowed, tokens)
  if op then
    local last = charged
    if kind ~= 'a' then
      local u = {}
      for i = 1, n do
        local c = 0
        if allowed == 1 then
          if kind == 'g' then c = (tokens or 0) * A[3] else c = math.max(0, A[3 + 3 * i] + 0) end
        end
        u[i] = format('%.0f', c)
      end
      last = 'c' .. table.concat(u, ':')
    end
    if last ~= '' then last = '\\n' .. last end
    local record = format('%s\\n%d\\n%.0f\\n%s\\n%s%s', A[#A], allowed, now, tokens or '', v or '', last)
    redis.call('SET', op, record, 'PX', A[#A - 1])
  end
  local out = {allowed, now, tokens or -1}
  read(out, v, s, k, fast)
  if charged ~= '' then out[#out + 1] = string.sub(charged, 2) end
  return out
end
` +
  // A key with an override record, or a step under a policy-wide change: core/override.ts's step.
  `if A[5] ~= '' or (v and string.find(v, '|', 1, true)) then
  local allowed, tokens = rstep(key, v, now, kind, A[3], 6, n, B, P)
  if not allowed then return redis.error_reply('ERR edge-limiter gcra: a key with override numbers needs ARGV[4], the base') end
  return reply(allowed, tokens)
end
if kind == 't' then return reply((take(key, v, s, k, now, 5, n))) end
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
  local cost = A[6] + 0
  if cost == 0 then return reply(1) end
  local debt = debt_at(s, k, 1, now, A[8])
` +
  // The largest k <= cost / unit with debt + k * unit <= limit: the floor, corrected by one either way.
  `  local unit = A[3] + 0
  local room = A[7] - debt
  local q = math.floor(room / unit)
  if q * unit > room then q = q - 1 elseif (q + 1) * unit <= room then q = q + 1 end
  if q > cost / unit then q = cost / unit end
  if q <= 0 then return reply(0, 0) end
  local after = debt + q * unit
  save(key, v, {after}, 1, now, math.max(1000, ceil(after / (A[8] * 1000))), true)
  return reply(1, q)
end
local since = tonumber(A[3])
local f = {}
local px, peek, keep = 1000, true, false
for i = 1, n do
  local j = 5 + 3 * i
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
export const GCRA_SCRIPT_SHA = 'c25300efcb64830cbae6f6e49f02a32b455a9892';

// Many takes in one script call: one TIME read and one MGET, then each key's take in order, exactly
// as the single-key script's "t" (a key listed twice sees its earlier step). The whole script is
// atomic, so each key's step is too. Grants and adjustments go through the single-key script.
export const GCRA_BATCH_SCRIPT = `-- edge-limiter gcra batch v10
` +
  // KEYS[i]: the bucket keys, decided in order
  // ARGV[1]: nowUs from the caller, only in the explicit client-clock mode; "" reads the server clock
  // Then each key's take in turn, from b = 2: ARGV[b] its number of limits n plus 16 times its entry e,
  // and ARGV[b+1 .. b+3n] the limits (see above; every cost 0: a peek); the next key's is at ARGV[b + 3n + 1]
  // Then the entries, after the last key: entry e's base and policy-wide change, as the single-key
  // script's ARGV[4] and ARGV[5]. Keys of one policy share one, so a batch sends each base once, and a
  // key's entry costs its usual step no ARGV (e 0: no base and no policy-wide change)
  // Returns {nowUs, allowed1, count1, ..., allowed2, count2, ...}: the clock reading in whole µs (TIME's,
  // or ARGV[1]), then each key's verdict (-2: refused, nothing written for it: a key with override
  // numbers and no base, or a base or policy of another count of limits) and the value its step read (see
  // read: 0; k and k integers; or -1 and the value)
  `local A = ARGV
` +
  // The arguments, checked before anything is read or written (see refuse): the clock ("" or a finite
  // number), then per key a count of 1 to ${MAX_LIMITS} limits and an entry number, and as many triples of
  // finite numbers; then pairs of a base and a policy-wide change, each "" or of its form (numbers below
  // 2^53), as many as the largest entry number. A count that does not match its ARGV never reaches
  // fields, whose pattern grows with it. The usual count, 1 (entry 0), and the usual 17 (entry 1), are
  // tried first. No key at all is refused by the MGET, before any write.
  `local b, last, sum, top, bad = 2, #A, 0, 0
if A[1] ~= '' then sum = A[1] + 0 end
for _ = 1, #KEYS do
  local c = A[b] + 0
  local n = c % 16
  if (c == 1 or c == 17) and b + 3 <= last then sum = sum + A[b + 1] + A[b + 2] + A[b + 3]
  elseif n >= 1 and n <= ${MAX_LIMITS} and c % 1 == 0 and c > 0 and c < 1e6 and b + 3 * n <= last then
    for i = b + 1, b + 3 * n, 3 do sum = sum + A[i] + A[i + 1] + A[i + 2] end
  else
    bad = b
    break
  end
  if c > top then top = c end
  b = b + 3 * n + 1
end
if not bad then
  top = (top - top % 16) / 16
  if last - b + 1 ~= 2 * top then bad = b + 2 * top elseif sum * 0 ~= 0 then bad = -1 end
end
` +
  // Each entry's base and policy-wide change, checked once per call, by their form: read as numbers
  // only for a key that needs them, whose step is then refused alone (-2) for a number of 2^53 or more.
  `for e = 1, top do
  local x = b + 2 * e - 2
  if A[x] ~= '' and not (string.find(A[x], '^%d+,[1-9][%d,]*%d$') and not string.find(A[x], ',,', 1, true) and not string.find(A[x], ',0', 1, true)) then bad = x end
  local p = A[x + 1]
  if p ~= '' then
    local l = string.match(p, '^([1-9][%d,]*%d)|%d*|%C+$') or string.match(p, '^([1-9])|%d*|%C+$')
    if not l or string.find(l, ',,', 1, true) or string.find(l, ',0', 1, true) then bad = x + 1 end
  end
end
${refuse('gcra batch')}
${SHARED}
` +
  // core/override.ts in Lua (RECORD), made only when a key of this call needs it: its closures cost a
  // call of usual keys Redis time for nothing.
  `local record_step, record_list
local ebase = {}
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
  local c = A[b] + 0
  local n = c % 16
  local e = (c - n) / 16
  local allowed, after
` +
  // The usual key (1 to ${FAST_LIMITS} limits, no policy-wide change; no value, or the usual one) in
  // straight lines, as the single-key script's; any other leaves allowed nil, for the general path below.
  `  ${upTo(
    FAST_LIMITS,
    (n) => `${n === 1 ? 'if' : 'elseif'} n == ${n} and (e == 0 or A[last - 2 * top + 2 * e] == '') then
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
      end${
        n === 1
          ? `
    elseif e > 0 then
      local j, hit = b + 1, false
      ${indent(recordTake(batchBase), '      ')}
      if hit then
        out[m + 1] = allowed
        out[m + 2] = -1
        out[m + 3] = v
        m = m + 3
      end`
          : ''
      }
    end`,
    '\n  ',
  )}
  end
  if allowed == nil then
    local s, k, fast = fields(v, n)
    local ps = e > 0 and A[last - 2 * top + 2 * e] or ''
` +
  // A key with an override record, or a take under a policy-wide change: core/override.ts's step
  // (refused, for this key alone, when its entry is not of its count of limits).
  `    if ps ~= '' or (v and string.find(v, '|', 1, true)) then
      if not record_step then
        ${indent(RECORD, '        ')}
        record_step, record_list = rstep, list
      end
      local B, P, tokens
      if e > 0 then
        local bs = A[last - 2 * top + 2 * e - 1]
        if bs ~= '' then B = record_list(bs, 2 * n + 1, 2) end
        if ps ~= '' then
          local l, u, id = string.match(ps, '^([%d,]+)|(%d*)|(%C+)$')
          P = {l = record_list(l, 3 * n, 1), u = tonumber(u), id = id}
        end
      end
      if not ((e > 0 and A[last - 2 * top + 2 * e - 1] ~= '' and not B) or (P and not P.l)) then
        allowed, tokens, after = record_step(key, v, now, 't', '', b + 1, n, B, P)
      end
      if not allowed then allowed, after = -2, v end
    else
      allowed, after = take(key, v, s, k, now, b, n)
    end
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
export const GCRA_BATCH_SCRIPT_SHA = 'e1e71120f012ec294700a3a8a15f68071f168ef3';
