// The Redis side of one step (see core/gcra.ts `step`), run atomically by EVALSHA.
// A bucket's value is "<debt>:<atUs>": its debt in units at the server clock's reading atUs (whole µs),
// both integers below 2^53, which Lua's doubles hold exactly, formatted with %.0f (an exact round trip).
// The step only adds, subtracts and multiplies integers (and divides with an exact floor correction),
// so the script and the client compute the same numbers. The reply formats no number: it carries the
// verdict, the TIME reading and the stored value the step read, as Redis gave them, and the client
// redoes the step from those (core/gcra.ts `step`, in stores/redis.ts `resultOf`). Formatting a debt
// cost ~1 µs of Redis time per key.

/** The Lua that reads a stored value's debt now; shared by both scripts, so they cannot drift apart. */
const DEBT_OF = `local function debt_of(v, now, rate)
  if not v then return 0 end
  local i = string.find(v, ':', 1, true)
  if not i then return 0 end
  local d = tonumber(string.sub(v, 1, i - 1))
  local at = tonumber(string.sub(v, i + 1))
  if not (d and at) then return 0 end
  local debt = d - (now - at) * rate
  if debt > 0 then return debt end
  return 0
end
-- The value to store, and its expiry in ms: when the bucket is full again (a missing key is a full
-- bucket), but not sooner than 1 s. A key kept longer is harmless (its debt has decayed to nothing by
-- then), and the floor keeps Redis's own clock, which times expiry, from outrunning a clock sent in the
-- client-clock mode. Both formatted as integers: a Lua number of 1e14 or more would reach Redis as "1e+14".
local function save(key, after, now, rate)
  redis.call('SET', key, string.format('%.0f:%.0f', after, now), 'PX', string.format('%.0f', math.max(1000, math.ceil(after / (rate * 1000)))))
end`;

export const GCRA_SCRIPT = `-- edge-limiter gcra v5
-- KEYS[1]: the bucket key; its value is "<debt>:<atUs>" (see above)
-- ARGV[1]: costUnits, the debt this request adds (cost * tokenUnits); "0" means peek: read only;
--          below 0 a refund: the debt falls by that much, never below 0
-- ARGV[2]: limitUnits, the most debt allowed after the request
-- ARGV[3]: refillUnitsPerUs, the units one µs refills
-- ARGV[4]: nowUs from the caller, only in the explicit client-clock mode; "" reads the server clock
-- ARGV[5]: optional tokenUnits: a partial grant of as many whole tokens as fit, at most costUnits / tokenUnits
-- ARGV[6]: optional, with a refund: refundSinceUs, the server clock's reading at the grant given back; the
--          refund is then what the bucket has not refilled since: max(0, -costUnits - (now - since) * rate)
-- Returns {allowed, seconds, microseconds, value}: the verdict, TIME's reading ("" in client-clock mode)
-- and the value the step read (nil: no key); with ARGV[5], a fifth element: the tokens taken
${DEBT_OF}
local now
local t = {'', ''}
if ARGV[4] == '' then
  t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[4])
end
local v = redis.call('GET', KEYS[1])
local rate = tonumber(ARGV[3])
local debt = debt_of(v, now, rate)
local cost = tonumber(ARGV[1])
if cost == 0 then return {1, t[1], t[2], v} end
local after
local tokens
if cost < 0 then
  if ARGV[6] and ARGV[6] ~= '' then
    local since = tonumber(ARGV[6])
    if now > since then cost = math.min(0, cost + (now - since) * rate) end
  end
  after = debt + cost
  -- A refund never makes the bucket fuller than full: at no debt the key goes, which is a full bucket.
  if after <= 0 then
    if v then redis.call('DEL', KEYS[1]) end
    return {1, t[1], t[2], v}
  end
elseif ARGV[5] and ARGV[5] ~= '' then
  -- The largest k <= cost / unit with debt + k * unit <= limit: the floor, corrected by one either way.
  local unit = tonumber(ARGV[5])
  local room = tonumber(ARGV[2]) - debt
  local k = math.floor(room / unit)
  if k * unit > room then k = k - 1 elseif (k + 1) * unit <= room then k = k + 1 end
  if k > cost / unit then k = cost / unit end
  if k <= 0 then return {0, t[1], t[2], v, 0} end
  tokens = k
  after = debt + k * unit
else
  after = debt + cost
  if after > tonumber(ARGV[2]) then return {0, t[1], t[2], v} end
end
save(KEYS[1], after, now, rate)
if tokens then return {1, t[1], t[2], v, tokens} end
return {1, t[1], t[2], v}
`;

/** SHA1 of GCRA_SCRIPT, as Redis computes it (a test checks this against SCRIPT LOAD). */
export const GCRA_SCRIPT_SHA = '26b9370ab6bb60bf520964e3bcc25225c2b11b4b';

// Many decisions in one script call: one TIME read and one MGET, then each key's step in order,
// exactly as above (a key listed twice sees its earlier step). The whole script is atomic, so each
// key's step is too.
export const GCRA_BATCH_SCRIPT = `-- edge-limiter gcra batch v3
-- KEYS[i]: the bucket keys, decided in order
-- ARGV[3i-2]: costUnits of KEYS[i] ("0": peek); ARGV[3i-1]: its limitUnits; ARGV[3i]: its refillUnitsPerUs
-- ARGV[3n+1]: nowUs from the caller, only in the explicit client-clock mode; "" reads the server clock
-- Returns {seconds, microseconds, allowed1, value1, allowed2, value2, ...}: TIME's reading ("" in
-- client-clock mode), then each key's verdict and the value its step read (nil: no key)
${DEBT_OF}
local n = #KEYS
local now
local t = {'', ''}
if ARGV[3 * n + 1] == '' then
  t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[3 * n + 1])
end
local read = redis.call('MGET', unpack(KEYS))
-- What this call wrote, by key, so that a key listed again reads its earlier step.
local written = {}
local out = {t[1], t[2]}
for i = 1, n do
  local key = KEYS[i]
  local v = written[key]
  if v == nil then v = read[i] end
  local rate = tonumber(ARGV[3 * i])
  local cost = tonumber(ARGV[3 * i - 2])
  local after = debt_of(v, now, rate) + cost
  local allowed = 1
  if cost ~= 0 then
    if after > tonumber(ARGV[3 * i - 1]) then
      allowed = 0
    else
      save(key, after, now, rate)
      written[key] = string.format('%.0f:%.0f', after, now)
    end
  end
  out[2 * i + 1] = allowed
  out[2 * i + 2] = v
end
return out
`;

/** SHA1 of GCRA_BATCH_SCRIPT (checked against SCRIPT LOAD by a test). */
export const GCRA_BATCH_SCRIPT_SHA = '63b1d0ae0971a3fc434f4eefd8d9e3ebd79a455d';
