// The Redis side of Store.override and Store.reset (issue 31): one script, run atomically by EVALSHA on
// the bucket's own key (so in its hash slot), that changes the key's override record and carries the
// bucket to the new numbers (core/override.ts applyOverride, line for line), or forgets the bucket and
// keeps the record. The stored value is ./redis-value.ts's; the client redoes the change with core and
// checks that the script wrote the same value.
import { flush, SHARED } from './redis-lua.js';
import { RECORD } from './redis-record.js';

/** Lua: the script's refusal of the ARGV[bad] that is malformed (bad 0: their count), before any write. */
const refuseOverride = `if bad then return redis.error_reply('ERR edge-limiter override: ' .. (bad == 0 and #A .. ' ARGV, not 8' or 'ARGV[' .. bad .. '] malformed, got ' .. "'" .. string.gsub(string.sub(A[bad], 1, 32), '%c', '?') .. "'")) end`;

export const OVERRIDE_SCRIPT = flush(`-- edge-limiter override v19
` +
  // KEYS[1]: the bucket key
  // ARGV[1]: nowUs from the caller, only in the explicit client-clock mode; "" reads the server clock
  // ARGV[2]: "o" change the record; "r" reset: forget the bucket, keep the record
  // ARGV[3]: with "o", the base: "<t1>,<c1>,<r1>,...", each limit's tokenUnits, capacityUnits and
  // refillUnitsPerUs (1 to 8 limits, each number above 0 and below 2^53); with "r", ""
  // ARGV[4]: the numbers to set, as the base ("-": clear them, a key's own: a copy of a policy-wide
  // change or a marker stays unless ARGV[7] names one; "": keep)
  // ARGV[5]: with numbers to set, the ms they last ("": until cleared)
  // ARGV[6]: block for this many ms ("-": unblock; "": keep)
  // ARGV[7]: with numbers to set or "-", the id of the policy-wide change they are, or whose revert the
  // record becomes, a marker ("": a key's own): written after its version,
  // "<max(now, the version of the id replaced + 1)>.<id>" (core/override.ts changeVersion)
  // ARGV[8]: with ARGV[7] "", the node's view of the policy-wide change, as the gcra script's ARGV[5]
  // ("": none): a change to the record leaves what a step under it leaves, and carries as it does
  // Returns {nowUs, value read, value after}: the clock reading in whole µs, the key's value before and
  // after the change (0: no key)
  `local A, key = ARGV, KEYS[1]
local bad
if #A ~= 8 then bad = 0
elseif A[1] ~= '' and not string.find(A[1], '^%d+$') then bad = 1
elseif A[2] ~= 'o' and A[2] ~= 'r' then bad = 2
elseif A[2] == 'o' and not string.find(A[3], '^[%d,]+$') then bad = 3
elseif A[4] ~= '' and A[4] ~= '-' and not string.find(A[4], '^[%d,]+$') then bad = 4
elseif A[5] ~= '' and not string.find(A[5], '^%d+$') then bad = 5
elseif A[6] ~= '' and A[6] ~= '-' and not string.find(A[6], '^%d+$') then bad = 6
elseif string.find(A[7], '%c') then bad = 7
end
${refuseOverride}
local S, H = string.match(A[8], '^!(%d*)|(%d*)$')
${SHARED}
${RECORD}
local base, n, lim = {}, 0, nil
if A[2] == 'o' then
  base = list(A[3], 0, 1)
  if not base or #base % 3 ~= 0 or #base > 24 then bad = 3 else n = #base / 3 end
  if not bad and A[4] ~= '' and A[4] ~= '-' then
    lim = list(A[4], 3 * n, 1)
    if not lim then bad = 4 end
  end
end
local P
if A[8] ~= '' and not S then
  local l, u, h, id = string.match(A[8], '^([%d,]+)|(%d*)|(%d*)|(%C+)$')
  P, H = {l = list(l or '', 3 * n, 1), u = tonumber(u), id = id}, h
end
if P and not P.l or S and not (#S < 16 or S + 0 < 9007199254740992) or H and #H > 7 and not (H + 0 <= 86400000) then bad = bad or 8 end
S, H = tonumber(S), tonumber(H)
${refuseOverride}
local now = clock()
local v = redis.call('GET', key)
local b, rec = v, nil
if v then
  local pb, pr = rparse(v)
  if pb then b, rec = pb, pr end
  if b == '' then b = false end
end
if A[2] == 'r' then
  if not rec then
    if v then redis.call('DEL', key) end
    return {now, v or 0, 0}
  end
  return {now, v, rsave(key, v, nil, 0, now, rec, {}, {}, {})}
end
` +
  // A policy-wide call that changes nothing writes nothing (core/override.ts applyOverride): a revert
  // with a record but no change in force, or the numbers in force for the same limits, neither with an end.
  `if A[7] ~= '' and rec and rec.id and (A[4] == '-' and not live(rec, now) or rec.l and not rec.u and A[5] == '' and rtext({l = rec.l}) == A[4] .. '|||' and string.match(rec.id, '#.*') == string.match(A[7], '#.*')) then return {now, v, v} end
local bt, bc, br = {}, {}, {}
for i = 1, n do bt[i], bc[i], br[i] = base[3 * i - 2], base[3 * i - 1], base[3 * i] end
local nx = {}
if rec then nx.l, nx.u, nx.bl, nx.id = rec.l, rec.u, rec.bl, rec.id end
if A[4] == '-' then
  if A[7] ~= '' or not nx.id then nx.l, nx.u, nx.id = nil, nil, nil end
elseif lim then
  nx.l, nx.u, nx.id = lim, nil, nil
  if A[5] ~= '' then nx.u = now + A[5] * 1000 end
end
local pin = A[4] ~= '' and A[7] ~= ''
if pin then
` +
  // The id says the version of the record replaced and since when the policy's numbers were in force
  // up to this one (core/override.ts priorOf, baseSince).
  `  local pv = version(rec and rec.id)
  local vn = math.max(now, pv + 1)
  local q = rec and rec.id and (live(rec, now) and vn or rec.l and rec.u or tonumber(string.match(rec.id, '^%d+%.%d+%.(%d+)%.')) or pv) or 0
  nx.id = format('%d.%d.%d.', vn, pv, q) .. A[7]
end
if A[6] == '-' then nx.bl = nil elseif A[6] ~= '' then nx.bl = now + A[6] * 1000 end
local after = live_record(nx, now)
local read = A[4] == '' and A[6] == ''
local x = nil
if not read and A[8] ~= '' then
  after = rview(after, P, S, now)
  x = rview(live_record(rec, now), P, S, now)
end
` +
  // Nothing changes (the same record again: the same text), or a read (no numbers, no block, even where
  // something has ended: the key's next step carries past it under its view): nothing is written.
  `if read or (rec and rtext(rec)) == (after and rtext(after)) then return {now, v or 0, v or 0} end
local s, k, _, h = fields(b, n)
local w = nil
if k > 1 then w = rcarry(s, k, n, rec, x, after, now, bt, bc, br, h, (P or S) and (S or 0), P) end
` +
  // Numbers or "-" with an id (pin) are the policy-wide change itself or the marker of its revert
  // (setPolicyLimits, clearPolicyLimits, on the policy's key): kept with no expiry.
  `return {now, v or 0, rsave(key, v, w, n, now, after, bt, bc, br, pin, H, horizon(h, now)) or 0}
`);

/** SHA1 of OVERRIDE_SCRIPT (checked against SCRIPT LOAD by a test). */
export const OVERRIDE_SCRIPT_SHA = 'd233098b82ec22a25826e2321316a7bc14d5f54b';
