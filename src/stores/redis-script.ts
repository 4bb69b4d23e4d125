// The Redis side of one GCRA step (see core/gcra.ts `step`), run atomically by EVALSHA.
// Numbers cross the boundary as strings: Lua numbers are doubles, and Redis truncates a Lua float
// reply to an integer, so the debt goes back as a %.17g string (exact round trip).

export const GCRA_SCRIPT = `-- edge-limiter gcra v2
-- KEYS[1]: the bucket key; its value is the TAT, ms since the epoch, as a %.17g string
-- ARGV[1]: costMs, the debt this request adds (cost * intervalMs); "0" means peek: read only;
--          below 0 a refund: the debt falls by that much, never below 0
-- ARGV[2]: limitMs, the most debt allowed after the request (burstMs + maxWaitMs + slackMs)
-- ARGV[3]: nowMs from the caller, only in the explicit client-clock mode; "" reads the server clock
-- ARGV[4]: optional unitMs: a partial grant of as many whole units as fit, at most costMs / unitMs;
--          the reply then has a third element, the units taken
local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
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
if cost == 0 then return {1, string.format('%.17g', debt)} end
local limit = tonumber(ARGV[2])
local units
if cost < 0 then
  -- A refund never makes the bucket fuller than full: at no debt the key goes, which is a full bucket.
  if debt + cost <= 0 then
    redis.call('DEL', KEYS[1])
    return {1, '0'}
  end
  limit = debt
elseif ARGV[4] and ARGV[4] ~= '' then
  -- The largest k <= most with debt + k * unit <= limit: the floor, then one correction each way.
  local unit = tonumber(ARGV[4])
  local most = math.floor(cost / unit + 0.5)
  local k = math.min(most, math.floor((limit - debt) / unit))
  if k < most and debt + (k + 1) * unit <= limit then k = k + 1 end
  if k > 0 and debt + k * unit > limit then k = k - 1 end
  if k <= 0 then return {0, string.format('%.17g', debt), '0'} end
  units = k
  cost = k * unit
end
local after = debt + cost
if after > limit then return {0, string.format('%.17g', debt)} end
-- The key lives exactly until the bucket is full again; after that, no key means a full bucket.
-- PX is formatted as a plain integer: a Lua number argument of 1e14 or more would reach Redis as "1e+14".
redis.call('SET', KEYS[1], string.format('%.17g', now + after), 'PX', string.format('%.0f', math.ceil(after)))
if units then return {1, string.format('%.17g', after), string.format('%d', units)} end
return {1, string.format('%.17g', after)}
`;

/** SHA1 of GCRA_SCRIPT, as Redis computes it (a test checks this against SCRIPT LOAD). */
export const GCRA_SCRIPT_SHA = 'b433f6481719d3e730cc0e3f7f088386bb9f2777';

// Many decisions in one script call: one TIME read, then each key's step in order, exactly as above
// (a key listed twice sees its earlier step). The whole script is atomic, so each key's step is too.
export const GCRA_BATCH_SCRIPT = `-- edge-limiter gcra batch v1
-- KEYS[i]: the bucket keys, decided in order
-- ARGV[2i-1]: costMs of KEYS[i] ("0": peek); ARGV[2i]: its limitMs (see the single-key script)
-- ARGV[2n+1]: nowMs from the caller, only in the explicit client-clock mode; "" reads the server clock
-- Returns {allowed1, debt1, allowed2, debt2, ...}, debts as %.17g strings
local n = #KEYS
local now
if ARGV[2 * n + 1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
else
  now = tonumber(ARGV[2 * n + 1])
end
local out = {}
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  local debt = 0
  if v then
    local tat = tonumber(v)
    if tat and tat > now then debt = tat - now end
  end
  local cost = tonumber(ARGV[2 * i - 1])
  local after = debt + cost
  if cost == 0 or after > tonumber(ARGV[2 * i]) then
    out[2 * i - 1] = cost == 0 and 1 or 0
    out[2 * i] = string.format('%.17g', debt)
  else
    redis.call('SET', KEYS[i], string.format('%.17g', now + after), 'PX', string.format('%.0f', math.ceil(after)))
    out[2 * i - 1] = 1
    out[2 * i] = string.format('%.17g', after)
  end
end
return out
`;

/** SHA1 of GCRA_BATCH_SCRIPT (checked against SCRIPT LOAD by a test). */
export const GCRA_BATCH_SCRIPT_SHA = 'a2380181e637ed4b61a11b1e7bb159de2be9c9c2';
