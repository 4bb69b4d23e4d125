// The Redis side of many takes in one call (the batch script), run atomically by EVALSHA; the value
// format and the limits' ARGV triples are ./redis-script.ts's.
import { MAX_LIMITS } from '../core/policy.js';
import { FAST_LIMITS, fastTake, flush, indent, refuse, SHARED, unsafe, upTo, usualValue } from './redis-lua.js';
import { RECORD } from './redis-record.js';
import { batchBase, batchParse, recordTake } from './redis-record-take.js';

// Many takes in one script call: one TIME read and one MGET, then each key's take in order, exactly
// as the single-key script's "t" (a key listed twice sees its earlier step). The whole script is
// atomic, so each key's step is too. Grants and adjustments go through the single-key script.
export const GCRA_BATCH_SCRIPT = flush(`-- edge-limiter gcra batch v28
` +
  // KEYS[i]: the bucket keys, decided in order
  // ARGV[1]: nowUs from the caller, only in the explicit client-clock mode; "" reads the server clock
  // Then each key's take in turn, from b = 2: ARGV[b] its number of limits n plus 16 times its entry e,
  // and ARGV[b+1 .. b+3n] the limits (see above; every cost 0: a peek); the next key's is at ARGV[b + 3n + 1]
  // Then the entries, after the last key: entry e's base and policy-wide change, as the single-key
  // script's ARGV[4] and ARGV[5] (a change and its holdMs, or "!<seenUs>|<holdMs>"). Keys of one policy
  // share one, so a batch sends each base once, and a key's entry costs its usual step no ARGV (e 0: no
  // base and no policy-wide change)
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
  // epid: each entry's change's id (for recordTake); enc: true where it sends no change (the usual
  // path's), eseen: its policySeenUs as a number, refused at 2^53 or more (0 as nil, the same to a step,
  // so that the usual key's straight-line take compares no bucket with it); ehold: its policyHoldMs (nil:
  // 0), refused above a day; ew: true where its base has a wait (maxWaitMs above 0), so that a take may
  // be a reservation, whose due only the general path keeps in the value (see fastTake).
  `local epid, enc, eseen, ehold, ew = {}, {}, {}, {}, {}
for e = 1, top do
  local x = b + 2 * e - 2
  if A[x] ~= '' and not (string.find(A[x], '^%d+,[1-9][%d,]*%d$') and not string.find(A[x], ',,', 1, true) and not string.find(A[x], ',0', 1, true)) then bad = x end
  local p = A[x + 1]

  local sd, hd = string.match(p, '^!(%d*)|(%d*)$')
  if p == '' then enc[e] = true
  else
    if sd then
      enc[e], eseen[e] = true, tonumber(sd)
      if eseen[e] and not (eseen[e] < 9007199254740992) then bad = x + 1 end
      if eseen[e] == 0 then eseen[e] = nil end
    else
      local l, id
      l, hd, id = string.match(p, '^([1-9][%d,]*%d)|%d*|(%d*)|(%C+)$')
      if not l then l, hd, id = string.match(p, '^([1-9])|%d*|(%d*)|(%C+)$') end
      if not l or string.find(l, ',,', 1, true) or string.find(l, ',0', 1, true) then bad = x + 1 end
      epid[e] = id
    end
    ehold[e] = tonumber(hd)
    if ehold[e] and not (ehold[e] <= 86400000) then bad = x + 1 end
  end
  ew[e] = A[x] ~= '' and string.sub(A[x], 1, 2) ~= '0,'
end
${refuse('gcra batch')}
${SHARED}
` +
  // core/override.ts in Lua (RECORD), made only when a key of this call needs it: its closures cost a
  // call of usual keys Redis time for nothing.
  `local record_step
local ebase, rtails, ebases = {}, {}, {}
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
    (n) => `${n === 1 ? 'if' : 'elseif'} n == ${n}${n === 1 ? '' : ' and (e == 0 or enc[e])'} then
    ${indent(usualValue(n), '    ')}
    if (not v or at)${n === 1 ? ' and (e == 0 or enc[e])' : ''} and not (at and eseen[e] and at + 0 < eseen[e]) then
      local j, w, ${upTo(n, (i) => `k${i}`, ', ')} = b + 1, e > 0 and ew[e]
      if w then
        local B = ebases[c]
        if B == nil then
          B = list(A[last - 2 * top + 2 * e - 1], 2 * n + 1, 2) or false
          ebases[c] = B
        end
        if B then ${upTo(n, (i) => `k${i}`, ', ')} = ${upTo(n, (i) => `B[${2 * i + 1}]`, ', ')} end
      end
      ${indent(fastTake(n), '      ')}
      out[m + 1] = allowed
      if allowed < 0 then
        allowed = nil
      elseif not v then
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
    elseif e > 0 and v and not at then
      local j, hit = b + 1, false
      ${indent(recordTake(batchBase, 'epid[e]', '(ehold[e] or 0)', batchParse), '      ')}
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
    local s, k, fast, h = fields(v, n)
    local ps = ''
    if e > 0 and not enc[e] then ps = A[last - 2 * top + 2 * e] end
` +
  // A key with an override record, or a take under a policy-wide change: core/override.ts's step
  // (refused, for this key alone, when its entry is not of its count of limits).
  `    if ps ~= '' or (v and string.find(v, '|', 1, true)) or (k > 1 and eseen[e] and s[k] + 0 < eseen[e]) then
      if not record_step then
        ${indent(RECORD, '        ')}
        record_step = rstep
      end
      local B, P, tokens
      if e > 0 then
        local bs = A[last - 2 * top + 2 * e - 1]
        if bs ~= '' then B = list(bs, 2 * n + 1, 2) end
        if ps ~= '' then
          local l, u, id = string.match(ps, '^([%d,]+)|(%d*)|%d*|(%C+)$')
          P = {l = list(l, 3 * n, 1), u = tonumber(u), id = id}
        end
      end
      if not ((e > 0 and A[last - 2 * top + 2 * e - 1] ~= '' and not B) or (P and not P.l)) then
        allowed, tokens, after = record_step(key, v, now, 't', '', b + 1, n, B, P, eseen[e], ehold[e])
      end
      if not allowed then allowed, after = -2, v end
    else
      local B = nil
      if e > 0 then
        B = ebases[c]
        if B == nil then
          B = list(A[last - 2 * top + 2 * e - 1], 2 * n + 1, 2) or false
          ebases[c] = B
        end
      end
      allowed, after = take(key, v, s, k, now, b, n, B or nil, h)
    end
    out[m + 1] = allowed
    read(out, v, s, k, fast)
    m = #out
  end
  written[key] = after
  b = b + 3 * n + 1
end
return out
`);

/** SHA1 of GCRA_BATCH_SCRIPT (checked against SCRIPT LOAD by a test). */
export const GCRA_BATCH_SCRIPT_SHA = '16004b46ace224d6e4ff27b31664b707f409aa5e';
