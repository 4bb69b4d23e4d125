// The Redis side of one GCRA step (see core/gcra.ts `step`), run atomically by EVALSHA.
// Numbers cross the boundary as strings: Lua numbers are doubles, and Redis truncates a Lua float
// reply to an integer. The TAT is stored as a %.17g string (an exact round trip). The reply formats no
// number: it carries the verdict, the TIME reading and the stored TAT the step read, all as Redis gave
// them, and the client redoes the step from those (core/gcra.ts `step`, in stores/redis.ts `resultOf`)
// in the same double operations, so it gets the same numbers. Formatting a debt cost ~1 µs of Redis time
// per key.

export const GCRA_SCRIPT = `-- edge-limiter gcra v3
-- KEYS[1]: the bucket key; its value is the TAT, ms since the epoch, as a %.17g string
-- ARGV[1]: costMs, the debt this request adds (cost * intervalMs); "0" means peek: read only;
--          below 0 a refund: the debt falls by that much, never below 0
-- ARGV[2]: limitMs, the most debt allowed after the request (burstMs + maxWaitMs + slackMs)
-- ARGV[3]: nowMs from the caller, only in the explicit client-clock mode; "" reads the server clock
-- ARGV[4]: optional unitMs: a partial grant of as many whole units as fit, at most costMs / unitMs
-- Returns {allowed, seconds, microseconds, tat}: the verdict, TIME's reading ("" in client-clock mode)
-- and the value the step read (nil: no key); with ARGV[4], a fifth element: the units taken
local now
local t = {'', ''}
if ARGV[3] == '' then
  t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
else
  now = tonumber(ARGV[3])
end
local v = redis.call('GET', KEYS[1])
local debt = 0
if v then
  local tat = tonumber(v)
  if tat and tat > now then debt = tat - now end
end
local cost = tonumber(ARGV[1])
if cost == 0 then return {1, t[1], t[2], v} end
local limit = tonumber(ARGV[2])
local units
if cost < 0 then
  -- A refund never makes the bucket fuller than full: at no debt the key goes, which is a full bucket.
  if debt + cost <= 0 then
    redis.call('DEL', KEYS[1])
    return {1, t[1], t[2], v}
  end
  limit = debt
elseif ARGV[4] and ARGV[4] ~= '' then
  -- The largest k <= most with debt + k * unit <= limit: the floor, then one correction each way.
  local unit = tonumber(ARGV[4])
  local most = math.floor(cost / unit + 0.5)
  local k = math.min(most, math.floor((limit - debt) / unit))
  if k < most and debt + (k + 1) * unit <= limit then k = k + 1 end
  if k > 0 and debt + k * unit > limit then k = k - 1 end
  if k <= 0 then return {0, t[1], t[2], v, 0} end
  units = k
  cost = k * unit
end
local after = debt + cost
if after > limit then return {0, t[1], t[2], v} end
-- The key lives exactly until the bucket is full again; after that, no key means a full bucket.
-- PX is formatted as a plain integer: a Lua number argument of 1e14 or more would reach Redis as "1e+14".
redis.call('SET', KEYS[1], string.format('%.17g', now + after), 'PX', string.format('%.0f', math.ceil(after)))
if units then return {1, t[1], t[2], v, units} end
return {1, t[1], t[2], v}
`;

/** SHA1 of GCRA_SCRIPT, as Redis computes it (a test checks this against SCRIPT LOAD). */
export const GCRA_SCRIPT_SHA = '91c8e8cc5dece0f3879582ad9c0065769b4be16e';

// Many decisions in one script call: one TIME read and one MGET, then each key's step in order,
// exactly as above (a key listed twice sees its earlier step). The whole script is atomic, so each
// key's step is too.
export const GCRA_BATCH_SCRIPT = `-- edge-limiter gcra batch v2
-- KEYS[i]: the bucket keys, decided in order
-- ARGV[2i-1]: costMs of KEYS[i] ("0": peek); ARGV[2i]: its limitMs (see the single-key script)
-- ARGV[2n+1]: nowMs from the caller, only in the explicit client-clock mode; "" reads the server clock
-- Returns {seconds, microseconds, allowed1, tat1, allowed2, tat2, ...}: TIME's reading ("" in
-- client-clock mode), then each key's verdict and the value its step read (nil: no key)
local n = #KEYS
local now
local t = {'', ''}
if ARGV[2 * n + 1] == '' then
  t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
else
  now = tonumber(ARGV[2 * n + 1])
end
local read = redis.call('MGET', unpack(KEYS))
-- What this call wrote, by key, so that a key listed again reads its earlier step.
local written = {}
local out = {t[1], t[2]}
for i = 1, n do
  local key = KEYS[i]
  local v = written[key]
  if v == nil then v = read[i] end
  local debt = 0
  if v then
    local tat = tonumber(v)
    if tat and tat > now then debt = tat - now end
  end
  local cost = tonumber(ARGV[2 * i - 1])
  local after = debt + cost
  local allowed = 1
  if cost ~= 0 then
    if after > tonumber(ARGV[2 * i]) then
      allowed = 0
    else
      local tat = string.format('%.17g', now + after)
      redis.call('SET', key, tat, 'PX', string.format('%.0f', math.ceil(after)))
      written[key] = tat
    end
  end
  out[2 * i + 1] = allowed
  out[2 * i + 2] = v
end
return out
`;

/** SHA1 of GCRA_BATCH_SCRIPT (checked against SCRIPT LOAD by a test). */
export const GCRA_BATCH_SCRIPT_SHA = '032daf7c2dab90489589b53902ce1202a7f0a814';
