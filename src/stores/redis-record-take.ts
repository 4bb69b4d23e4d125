// The straight-line Lua for a key with a record of its own (./redis-value.ts's format), inlined by both
// scripts beside their usual-value take, and the forms their base and policy-wide change ARGV are
// checked against before any key is read.
import { indent } from './redis-lua.js';

/**
 * Lua: the pattern a base ARGV of `n` limits matches (n a Lua expression): the wait, then each limit's
 * tokenUnits and capacityUnits above 0. Built for the general path only (the straight-line takes match
 * the base of one limit with literals), so it is the short form.
 */
export const baseShape = (n: string) => `'^%d+' .. string.rep(',[1-9]%d*', 2 * ${n}) .. '$'`;
/** Lua: the pattern a policy ARGV of `n` limits matches: 3n numbers above 0, untilUs and holdMs (each or nothing) and an id of no control character. */
export const policyShape = (n: string) => `'^[1-9]%d*' .. string.rep(',[1-9]%d*', 3 * ${n} - 1) .. '|%d*|%d*|%C+$'`;

/**
 * Lua: a take of one limit on the usual key with a record, in straight lines, as `rstep` decides it
 * (inlined by both scripts after their usual-value take, so a key with a plan of its own costs about
 * what a plain key does): the value "<debt>:<atUs>|<t>,<c>,<r>|||<id>" or "|<t>,<c>,<r>|||<id>" (numbers
 * with no end and no block: a key's own, id empty, or those of the policy-wide change `policyId` (Lua:
 * the id of the change this step sees, or nil), which core keeps as they are), a cost of at least 0,
 * and the base's numbers, which
 * `base` (Lua) sets as bw, bu, bc (maxWaitMs, tokenUnits, capacityUnits; nil when it is not of one
 * limit); `hold` (Lua) is the step's StepArgs.policyHoldMs as a number. Expects the locals key, v, now and the cost's
 * index j; sets `hit` when it decided, then `allowed` and `after` (the value after). Any other value,
 * or a number of 2^53 or more (the base's included, as the general path refuses it), leaves hit false for
 * the general path. The record has numbers and no end,
 * so the bucket is in them and nothing of the record changes: the debt decays at its refill, the cost
 * is converted up (convertUnits), the cap is its capacity plus the wait at its refill (the capacity alone
 * for a cost above it), a take left above the capacity (a reservation, whose due `rstep` keeps in the
 * value) is left to the general path (hit false), and the value is
 * written with rsave's expiry: none for a key's own numbers, the bucket's full time (at least 1 s) and
 * the hold for a policy-wide change's.
 */
export const recordTake = (base: string, policyId: string, hold: string, parse: RecordParse = singleParse) => `${parse.lua}
if rt and rid ~= '' and rid ~= (${policyId}) then rt = nil end
local bw, bu, bc
if rt then
  ${indent(base, '  ')}
end
local cost = A[j] + 0
if bu and cost >= 0 then
  local t, c, r, x, y = rt + 0, rc + 0, rr + 0, 0, nil
  if rd then x, y = rd + 0, rat + 0 end
  if t > 0 and c > 0 and r > 0 and t + c + r + x + bu + bw + bc < 9007199254740992 and (not y or y < 9007199254740992) then
    hit = true
    local d = 0
    if y then
      d = x - (now - y) * r
      if not (d > 0) then d = 0 end
    end
    local cc = cost
    if bu ~= t then
      if t % bu == 0 then cc = cost * (t / bu)
      else
        local m = bu
        if bu % t == 0 then m = bu / t end
        cc = math.floor(cost / m)
        if cc * m > cost then cc = cc - 1 elseif (cc + 1) * m <= cost then cc = cc + 1 end
        if cc * m < cost then cc = cc + 1 end
        if m == bu then cc = cc * t end
      end
      if cc > 4503599627370496 then cc = 4503599627370496 end
    end
    local lim = c
    if bw ~= 0 and cc <= c then lim = math.min(4503599627370496, c + bw * r * 1000) end
    local a = d + cc
    allowed, after = 1, v
    if cc > 0 and a > lim then allowed = 0
    elseif cc > 0 and a > c then hit, allowed = false, nil
    elseif cc ~= 0 then
      local f = '%d:%d${parse.tail}'
      if not (now % 1 == 0 and now > 0 and now < 1e18 and a % 1 == 0 and a < 1e18) then f = '%.0f:%.0f${parse.tail}' end
      after = string.format(f, a, now, ${parse.args})
      if rid == '' then redis.call('SET', key, after)
      else
        local ms = math.max(1000, math.ceil(a / (r * 1000)), ${hold})
        if ms < 1e18 then ms = string.format('%d', ms) else ms = string.format('%.0f', ms) end
        redis.call('SET', key, after, 'PX', ms)
      end
    end
  end
end`;

/**
 * How recordTake reads the value: `lua` sets rd, rat (the debt and atUs, nil with no bucket) and rt, rc,
 * rr, rid (the record's numbers and id as digit strings; rt nil for any other value); the value written
 * is string.format('%d:%d' .. tail, debt, now, args), the record after atUs as it was read.
 */
export interface RecordParse {
  lua: string;
  tail: string;
  args: string;
}

/** recordTake's parse for the single-key script: one match of the whole value. */
export const singleParse: RecordParse = {
  lua: `local rd, rat, rt, rc, rr, rid = string.match(v or '', '^(%d+):(%d+)|(%d+),(%d+),(%d+)|||(.*)$')
if not rt then rt, rc, rr, rid = string.match(v or '', '^|(%d+),(%d+),(%d+)|||(.*)$') end`,
  tail: '|%s,%s,%s|||%s',
  args: 'rt, rc, rr, rid',
};

/**
 * recordTake's parse for the batch script, the same locals as singleParse's: the value is split at
 * atUs, and the record after it parsed once per call for each distinct tail (rtails, by tail: its
 * fields, or false), so a call of many keys with the same numbers matches each value against one
 * short pattern and builds no string but the captures. The split is the same match: the atUs digits
 * are followed by '|' in both.
 */
export const batchParse: RecordParse = {
  lua: `local rd, rat, rtail, rt, rc, rr, rid
if v then
  rd, rat, rtail = string.match(v, '^(%d+):(%d+)(|.*)$')
  if not rd then rtail = v end
  local f = rtails[rtail]
  if f == nil then
    f = false
    local t, c, r, id = string.match(rtail, '^|(%d+),(%d+),(%d+)|||(.*)$')
    if t then f = {t, c, r, id} end
    rtails[rtail] = f
  end
  if f then rt, rc, rr, rid = f[1], f[2], f[3], f[4] else rd, rat = nil, nil end
end`,
  tail: '%s',
  args: 'rtail',
};

/** recordTake's base for the single-key script: ARGV[4], read as numbers when it is of baseShape's form (else not read: the general path). */
export const singleBase = `bw, bu, bc = string.match(A[4], '^(%d+),([1-9]%d*),([1-9]%d*)$')
if bu then bw, bu, bc = bw + 0, bu + 0, bc + 0 end`;

/** recordTake's base for the batch script: entry e's, read as numbers once per call (ebase). */
export const batchBase = `local eb = ebase[e]
if eb == nil then
  local w, u, c = string.match(A[last - 2 * top + 2 * e - 1], '^(%d+),(%d+),(%d+)$')
  eb = false
  if u then eb = {w + 0, u + 0, c + 0} end
  ebase[e] = eb
end
if eb then bw, bu, bc = eb[1], eb[2], eb[3] end`;
