// The Redis side of one GCRA step (see core/gcra.ts `step`), run atomically by EVALSHA.
// Numbers cross the boundary as strings: Lua numbers are doubles, and Redis truncates a Lua float
// reply to an integer, so the debt goes back as a %.17g string (exact round trip).

export const GCRA_SCRIPT = `-- edge-limiter gcra v1
-- KEYS[1]: the bucket key; its value is the TAT, ms since the epoch, as a %.17g string
-- ARGV[1]: costMs, the debt this request adds (cost * intervalMs); "0" means peek: read only
-- ARGV[2]: limitMs, the most debt allowed after the request (burstMs + maxWaitMs + slackMs)
-- ARGV[3]: nowMs from the caller, only in the explicit client-clock mode; "" reads the server clock
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
local after = debt + cost
if after > tonumber(ARGV[2]) then return {0, string.format('%.17g', debt)} end
-- The key lives exactly until the bucket is full again; after that, no key means a full bucket.
-- PX is formatted as a plain integer: a Lua number argument of 1e14 or more would reach Redis as "1e+14".
redis.call('SET', KEYS[1], string.format('%.17g', now + after), 'PX', string.format('%.0f', math.ceil(after)))
return {1, string.format('%.17g', after)}
`;

/** SHA1 of GCRA_SCRIPT, as Redis computes it (a test checks this against SCRIPT LOAD). */
export const GCRA_SCRIPT_SHA = '0f3166a145b34d142ad2b705455475a924afaa24';
