// The Redis side of one step (see core/gcra.ts `step`), run atomically by EVALSHA.
// A bucket's value is "<debt1>:<debt2>:...:<debtN>:<atUs>": each limit's debt in its units, in the
// policy's order, at the server clock's reading atUs (whole µs), all integers below 2^53, which Lua's
// doubles hold exactly, formatted with %d (%.0f where %d would not print the same digits; an exact
// round trip either way). A bucket of one limit is
// "<debt>:<atUs>", as every earlier version wrote it. While a reservation is pending (a take that waits
// left a limit above its capacity), "~<reservedUntilUs>" follows: when the last one granted is due
// (core/gcra.ts BucketState.reservedUntilUs; see ./redis-record.ts). The step only adds, subtracts and multiplies
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
import { FAST_LIMITS, fastTake, flush, indent, refuse, SHARED, unsafe, upTo, usualValue } from './redis-lua.js';
import { RECORD } from './redis-record.js';
import { baseShape, policyShape, recordTake, singleBase } from './redis-record-take.js';

/**
 * Lua: ARGV[5] read (S and H; see GCRA_SCRIPT) and checked, refused (see refuse) unless it is "", "!<seenUs>|<holdMs>"
 * with a seenUs below 2^53 and a holdMs up to a day, or a change of its shape (see policyShape) with a
 * holdMs up to a day; each number is read as one only when it has the digits to be past its bound. An
 * earlier refusal's ARGV (bad) is the one named.
 */
const viewCheck = `S, H = string.match(A[5], '^!(%d*)|(%d*)$')
if not S then H = string.match(A[5], '^[%d,]+|%d*|(%d*)|') end
if A[5] ~= '' and not S and not string.find(A[5], ${policyShape('n')}) or S and #S > 15 and not (S + 0 < 9007199254740992) or H and #H > 7 and not (H + 0 <= 86400000) then bad = bad or 5 end
${refuse('gcra')}`;

export const GCRA_SCRIPT = flush(`-- edge-limiter gcra v32
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
  // adjustment, always applied: per limit, a refund (costUnits below 0) never below no debt (while a
  // reservation is pending, never below the refill until it is due plus the capacity: core's step), a
  // charge never above limitUnits (a debt already above it is kept); "s" a settlement of the charge
  // recorded at KEYS[3] (always with KEYS[2]): each costUnits is the actual cost, and the step is the
  // adjustment "a" by costUnits minus what the charge took of that limit (its record's last field); no
  // such record, or not a take's: the reply is {"nocharge"}, and nothing is written
  // ARGV[3]: with "g", tokenUnits; with "a", refundSinceUs, the server clock's reading at the grant given
  // back ("": none), a refund then being what the bucket has not refilled since,
  // max(0, -costUnits - max(0, now - since) * rate); with "t", ""
  // ARGV[4]: StepArgs.base, "<maxWaitMs>,<tokenUnits1>,<capacityUnits1>,..." ("": not sent)
  // ARGV[5]: StepArgs.policy and policyHoldMs, "<t1>,<c1>,<r1>,...|<untilUs>|<holdMs>|<id>"; or, with no
  // change, StepArgs.policySeenUs and policyHoldMs, "!<seenUs>|<holdMs>" (whole µs below 2^53, whole ms
  // up to 86,400,000; each "" when absent), which only a key holding a record reads; "": none of them.
  // Both are checked where a step reads them (see the straight-line take)
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
  // ${MAX_LIMITS}, as 5 + 3n ARGV (7 + 3n with an operation id, whose ttl is digits), a known kind, and
  // every ARGV but the base and ARGV[5] (checked where read, below) a finite number, where ARGV[1] and
  // ARGV[3] may be "" (a grant's tokenUnits may not, and is above 0).
  `local last = #A
if op then last = last - 2 end
local n, kind, bad, S, H = (last - 5) / 3, A[2]
if not (n >= 1 and n <= ${MAX_LIMITS} and n % 1 == 0) then bad = 0
elseif kind ~= 't' and kind ~= 'g' and kind ~= 'a' and not (kind == 's' and op and KEYS[3]) then bad = 2
elseif op and not string.match(A[last + 1], '^[1-9]%d*$') then bad = last + 1
elseif kind == 'g' and not ((tonumber(A[3]) or 0) > 0) then bad = 3
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
  // operation id, no policy-wide change (nc: ARGV[5] "" or "!..."), a stored value that is missing or the
  // usual one of as many debts (so no override record and no reservation pending) and written at or
  // after the view's policySeenUs (its digits read unless they are "0": one written before refills
  // nothing up to it, which the general step counts), and, for a take that
  // may wait (w: a base whose maxWaitMs is not "0"), no limit it charged left above its capacity (a
  // reservation, whose due the general path keeps in the value; see fastTake); then, for one limit, a key
  // with numbers of its own or of the policy-wide change this step sees (recordTake). Of ARGV[5] it
  // reads the first byte, and of the base whether maxWaitMs is "0", the capacities of a take that may wait
  // (by a match of the base's whole form; none: the general path, unless a limit refuses the take first)
  // and, with a record, the base's numbers (singleBase, of the same form); ARGV[5]'s view or change only
  // for a value with a policy-wide change's numbers, which checks it (viewCheck). So it decides nothing
  // by what it has not checked, and checks nothing it does not read: those checks, made for every step,
  // were most of what a decision here cost more than before runtime limits (bench/overrides.ts; in a
  // loop at redis-server 7.0, ~0.25 µs the base's match, ~0.2 µs ARGV[5]'s and ~0.15 µs its numbers).
  // The general path checks both before it reads or writes. It makes no closure (each 'local function'
  // below is a new one on every call), no table but the reply and builds no pattern; its clock,
  // arithmetic, writes and reply are the general path's (clock, and see fastTake). Any other case falls
  // through to the general path, with the clock and the value already read.
  `local nc = string.byte(A[5]) == 33 or A[5] == ''
if A[2] == 't' and not op and (n == 1 or (n <= ${FAST_LIMITS} and nc)) then
  local z0, z1 = string.byte(A[4], 1, 2)
  local w = z0 and not (z0 == 48 and z1 == 44)
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
    if (not v or at) and nc and not (at and string.byte(A[5], 2) ~= 48 and at + 0 < (tonumber(string.match(A[5], '^!(%d+)')) or 0)) then
      local j, allowed, after, ${upTo(n, (i) => `k${i}`, ', ')} = 6
      if w then
        ${upTo(n, (i) => `k${i}`, ', ')} = string.match(A[4], '^%d+${',[1-9]%d*,([1-9]%d*)'.repeat(n)}$')
        if k1 then ${upTo(n, (i) => `k${i}`, ', ')} = ${upTo(n, (i) => `k${i} + 0`, ', ')} end
      end
      ${indent(fastTake(n), '      ')}
      if allowed >= 0 then
        if not v then return {allowed, now, -1, 0} end
        if ${unsafe(n)} then return {allowed, now, -1, -1, v} end
        return {allowed, now, -1, ${n + 1}, ${upTo(n, (i) => `x${i}`, ', ')}, y}
      end${
      n === 1
        ? `
    elseif v and not at then
      local j, hit, allowed, after = 6, false
      ${indent(recordTake(`${singleBase}\nif rid ~= '' then\n${viewCheck}\nend`, "not nc and string.match(A[5], '^[%d,]+|%d*|%d*|(.+)$') or nil", '(tonumber(H) or 0)'), '      ')}
      if hit then return {allowed, now, -1, -1, v} end`
        : ''
    }
    end`,
    '\n  ',
  )}
  end
end
` +
  // The base and ARGV[5], checked before the general path reads either or writes anything.
  `if A[4] ~= '' and not string.find(A[4], ${baseShape('n')}) then bad = 4 end
${viewCheck}
${SHARED}
${RECORD}
` +
  // The base and the policy-wide change as numbers (each below 2^53), refused before anything is written.
  `local B, P
if A[4] ~= '' then
  B = list(A[4], 2 * n + 1, 2)
  if not B then bad = 4 end
end
H = tonumber(H)
if S == '' then S = nil
elseif S then S = S + 0
elseif A[5] ~= '' then
  local l, u, id = string.match(A[5], '^([%d,]+)|(%d*)|%d*|(%C+)$')
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
local s, k, fast, h = fields(v, n)
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
  `if P or (v and string.find(v, '|', 1, true)) or (k > 1 and S and s[k] + 0 < S) then
  local allowed, tokens = rstep(key, v, now, kind, A[3], 6, n, B, P, S, H)
  if not allowed then return redis.error_reply('ERR edge-limiter gcra: a key with override numbers needs ARGV[4] (the base)') end
  return reply(allowed, tokens)
end
if kind == 't' then return reply((take(key, v, s, k, now, 5, n, B, h))) end
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
  save(key, v, {after}, 1, now, math.max(1000, ceil(after / (A[8] * 1000))), true, horizon(h, now))
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
    a = d - back
    if h and h > now - 1000 and B then a = math.max(a, math.min(d, (h - now) * r + B[2 * i + 1])) end
    if a < 0 then a = 0 end
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
if not peek then save(key, v, f, n, now, px, keep, horizon(h, now)) end
return reply(1)
`);

/** SHA1 of GCRA_SCRIPT, as Redis computes it (a test checks this against SCRIPT LOAD). */
export const GCRA_SCRIPT_SHA = '613cb4b83a995c2559acdec93c95cb89449f270f';

export { GCRA_BATCH_SCRIPT, GCRA_BATCH_SCRIPT_SHA } from './redis-batch.js';
