// The Lua parts both Redis scripts (./redis-script.ts) are built from: the refusal of malformed arguments,
// the shared functions that read, charge and save a bucket, and the straight-line take of 1 to
// FAST_LIMITS limits. TypeScript comments between the parts, so the minifier drops them.
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
export const refuse = (script: string) =>
  `if bad then return redis.error_reply('ERR edge-limiter ${script}: ' .. (bad == 0 and #A .. ' ARGV, not 1 to ${MAX_LIMITS} limits' or bad < 0 and 'a number in ARGV is not finite' or 'ARGV[' .. bad .. '] malformed, got ' .. (A[bad] and "'" .. string.gsub(string.sub(A[bad], 1, 32), '%c', '?') .. "'" or 'nothing'))) end`;

/** The Lua both scripts share (reading, charging and saving a bucket), so they cannot drift apart. */
export const SHARED = `local format, ceil = string.format, math.ceil
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
  local h
  local i = string.find(v, '~', 1, true)
  if i then
    h = string.match(v, '^~(%d+)$', i)
    if not h then return nil, 0 end
    h, v = h + 0, string.sub(v, 1, i - 1)
  end
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
  return s, k, false, h
end
` +
  // floor(a / b) exactly (core's floorDiv): the float quotient corrected by one either way.
  `local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
` +
  // Numbers joined by ',': count of them (0: any), each below 2^53 (and above 0 from index `pos` on,
  // where pos is 1 or 2); nil when malformed.
  `local function list(s, count, pos)
  if not (string.find(s, '^%d+$') or (string.find(s, '^%d[%d,]*%d$') and not string.find(s, ',,', 1, true))) then return nil end
  local t, m = {}, 0
  for x in string.gmatch(s, '%d+') do
    m = m + 1
    t[m] = x + 0
    if not (t[m] < 9007199254740992) or (m >= pos and t[m] == 0) then return nil end
  end
  if count > 0 and m ~= count then return nil end
  return t
end
` +
  // The reservation horizon a write at now keeps (core's horizon): the stored one h while its caller may
  // still come (core CALLER_LAG_US: 1 ms after it), or the later of it and a take's due (nil or 0:
  // none); nil when neither is.
  `local function horizon(h, now, due)
  due = due or 0
  if h and h > due then due = h end
  if due > 0 and due > now - 1000 then return due end
end
` +
  // A take's wait so far w, and a limit it charged whose debt after is over its capacity in force by
  // `over` at refill r: the longer of w and that limit's wait, in whole µs rounded up (core's dueOf).
  `local function due(w, over, r)
  if over > 0 then
    over = -fdiv(-over, r)
    if over > w then return over end
  end
  return w
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
  // full bucket), unless a reservation's caller may still come (h: core CALLER_LAG_US): returns false.
  // The expiry is when the slowest limit is full again, but not sooner than
  // 1 s: a key kept longer is harmless (its debts have decayed to nothing by then), and the floor keeps
  // Redis's own clock, which times expiry, from outrunning a clock sent in the client-clock mode. All
  // formatted as integers: a Lua number of 1e14 or more would reach Redis as "1e+14".
  `local function save(key, v, f, n, now, px, keep, h)
  if not keep and not h then
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
  if h then value = value .. format('~%d', h) end
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
  // A take on the key holding v (its fields s, k, and its reservation horizon h), at now, of the n limits
  // at A[b+1 ..]: all or nothing. Allowed when every charged limit (cost above 0) stays within its
  // limitUnits; then all are charged, else nothing changes. Every cost 0 is a peek: nothing is written.
  // With the base B ({maxWaitMs, t1, c1, ...}; nil: not sent), a take left above a capacity is a
  // reservation, and the value keeps when it is due (see horizon). Returns the verdict (1 or 0) and the
  // key's value after.
  `local function take(key, v, s, k, now, b, n, B, h)
  local elapsed = 0
  if k > 1 then elapsed = now - s[k] end
  local f = {0, 0}
  local wait, peek, keep, w = 0, true, false, 0
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
      if c > 0 and B then w = due(w, a - B[2 * i + 1], r) end
    end
    if a > 0 then
      keep = true
      local ms = a / (r * 1000)
      if ms > wait then wait = ms end
    end
    f[i] = a
  end
  if peek then return 1, v end
` +
  // A reservation on several limits comes at now + w: each limit it charged counts it then, as a take
  // at that time (core's step: its debt at least w's refill plus the cost, at most 2^52).
  `  if w > 0 then
    if n > 1 then
      for i = 1, n do
        local j = b + 3 * i
        local c, r = A[j - 2] + 0, A[j] + 0
        local x = math.min(2^52, w * r + c)
        if c > 0 and x > f[i] then
          f[i] = x
          if x / (r * 1000) > wait then wait = x / (r * 1000) end
        end
      end
    end
    w = now + w
  end
  return 1, save(key, v, f, n, now, math.max(1000, ceil(wait)), keep, horizon(h, now, w))
end`;

/** The most limits a take runs in straight lines (fastTake); a take of more goes through take. */
export const FAST_LIMITS = 3;
export const upTo = (n: number, f: (i: number) => string, sep: string) => Array.from({ length: n }, (_, i) => f(i + 1)).join(sep);
export const indent = (lua: string, by: string) => lua.replaceAll('\n', `\n${by}`);
/**
 * A script as sent: its lines without their indentation (Lua needs none; it is there for the reader of
 * the source). The Worker bundles these modules with the indentation already gone from their template
 * text (scripts/build-worker-deps.mjs buildWorkerSource), so that the script, and its SHA1, is the same
 * everywhere.
 */
export const flush = (lua: string) => lua.replace(/\n +/g, '\n');
/** d1, ..., dn, at: the usual value's digit strings, as fastTake expects them. */
const fieldNames = (n: number) => `${upTo(n, (i) => `d${i}`, ', ')}, at`;
/** Declares d1 .. dn and at, and matches the stored value v against the usual one of n limits (a literal pattern). */
export const usualValue = (n: number) =>
  `local ${fieldNames(n)}\nif v then ${fieldNames(n)} = string.match(v, '^${'(%d+):'.repeat(n)}(%d+)$') end`;
/** Whether the usual value's numbers x1 .. xn, y go back as the raw value, as read decides it (see read). */
export const unsafe = (n: number) =>
  `${upTo(n, (i) => `(#d${i} > 15 and not (x${i} < 9007199254740992))`, ' or ')} or (#at > 15 and not (y < 9007199254740992))`;

/**
 * take, save and read's work for n limits (1 to FAST_LIMITS) on a stored value that is missing or the
 * usual "<debt1>:...:<debtN>:<atUs>", inlined by both scripts in their hot path, where a function call,
 * the tables of fields and take, and the patterns built cost more Redis time than the step itself
 * (bench/redis-cost.ts). It expects the locals key, v, now, j (the index of limit 1's costUnits in
 * ARGV), w and k1 .. kn (a take that may wait, and the capacities of its base as numbers, nil when
 * unknown: a take that may wait and leaves a limit it charged above its capacity is a reservation,
 * whose due only the general path keeps, so it ends with allowed -1, nothing written, for that path)
 * and the value's digit strings d1 .. dn and at (usualValue; nil without a key); it declares x1 ..
 * xn and y, the value's numbers, for the reply, and sets the declared allowed and after (the key's value
 * after, as take returns it), step for step as take and save do: the same arithmetic in the same order,
 * ARGV read in the same order (so a malformed one fails alike), a limit that refuses ending the step
 * (the break out of the repeat, Lua 5.1 having no goto). The property tests (test/redis-exact.test.ts)
 * drive it in both scripts against core/gcra.ts.
 */
export const fastTake = (n: number) => {
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
  if w and (not k1 or ${upTo(n, (i) => `c${i} > 0 and a${i} > k${i}`, ' or ')}) then
    allowed = -1
    break
  end
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
