// Override records in Redis (issue 31): the Lua both scripts and the override script share. The stored
// value's format, and the ARGV the scripts take, are in ./redis-value.ts.

/**
 * Lua (after redis-lua.ts SHARED): reading a record, and core/override.ts in Lua. `rstep` is
 * stepWithRecord and `rsave` writes a bucket and its record with their expiry. The functions follow
 * core's, name for name where they can: numbers_at is numbersAt (per limit), rcarry carried, conv
 * convertUnits (carryDebt is conv rounding up); integers below 2^53 in doubles, and the same operations in the same
 * order, so the script and the client (which redoes the step with core) reach the same numbers.
 */
export const RECORD = `local MAXL = 4503599627370496
local function conv(x, from, to, up)
  if x < 0 then return -conv(-x, from, to, up) end
  local y
  if from == to then y = x
  elseif to % from == 0 then y = x * (to / from)
  else
    local m = from
    if from % to == 0 then m = from / to end
    y = fdiv(x, m)
    if up and y * m < x then y = y + 1 end
    if m == from then y = y * to end
  end
  if y > MAXL then return MAXL end
  return y
end
local function dec(d, from, to, r)
  d = d - (to - from) * r
  if d > 0 then return d end
  return 0
end
` +
  // core's carryDebt, after sameNumbers: a debt d at \`at\` carried from the numbers ft, fc, fr to tt, tc,
  // tr (the same: d as it is), whole; with a reservation due at h after \`at\`, at least as the bucket
  // will stand then (decayed under fr to h and carried, plus tr's refill until h); with h less than 1 ms
  // before \`at\` or after it, from d plus the refill counted since the slots of that ms (core lagUnits).
  `local function carry(d, ft, fc, fr, tt, tc, tr, at, h)
  if ft == tt and fc == tc and fr == tr then return d end
  if h and h > at - 1000 then d = math.max(d, math.min(MAXL, d + math.min(1000 * fr, fc + (math.min(h, at) - at + 1000) * fr))) end
  local whole = conv(d, ft, tt, true)
  if not (h and h > at) then return whole end
  local held = math.min(MAXL, (h - at) * tr + conv(dec(d, at, h, fr), ft, tt, true))
  if held > whole then return held end
  return whole
end
local function back(c, r, since, now)
  local u = -c
  if not since then return u end
  u = u - math.max(0, now - since) * r
  if u > 0 then return u end
  return 0
end
` +
  // A value holding a record: its bucket part and the record {l = numbers, u, bl, id, s = its text}; nil
  // when it holds none (see recordOf in TypeScript).
  `local function rparse(v)
  local b, l, u, bl, id = string.match(v, '^([%d:~]*)|([%d,]*)|(%d*)|(%d*)|(.*)$')
  if not b then return nil end
  local r = {u = tonumber(u), bl = tonumber(bl), s = l .. '|' .. u .. '|' .. bl .. '|' .. id}
  if l ~= '' then
    r.l = list(l, 0, 1)
    if not r.l or #r.l % 3 ~= 0 then return nil end
  end
  if id ~= '' then r.id = id end
  return b, r
end
local function live(r, t)
  return r and r.l and (not r.u or t < r.u)
end
` +
  // core's changeVersion: the digits (1 to 16) before the id's first '.', else 0.
  `local function version(id)
  local d = id and string.match(id, '^(%d+)%.')
  if d and #d < 17 then return d + 0 end
  return 0
end
` +
  // Limit i's numbers at t: the record's where live and it has them, else the base (bt, bc, br).
  `local function numbers_at(r, t, i, bt, bc, br)
  if live(r, t) and r.l[3 * i] then return r.l[3 * i - 2], r.l[3 * i - 1], r.l[3 * i], true end
  return bt[i], bc[i], br[i], false
end
` +
  // core's liveRecord: the record without what ended by now (the same table when nothing did; nil when
  // nothing is left). A marker (an id and no numbers, core's isMarker) is something left, and a copy of a
  // policy-wide change whose numbers ended is the marker of that change from then on (its id kept).
  `local function live_record(r, now)
  if not r then return nil end
  local nl, bk = live(r, now), r.bl and r.bl > now
  local mk = r.id and not nl
  if not nl and not bk and not mk then return nil end
  if (nl or not r.l) and (bk or not r.bl) then return r end
  local o = {}
  if nl then o.l, o.u = r.l, r.u end
  if nl or mk then o.id = r.id end
  if bk then o.bl = r.bl end
  return o
end
` +
  // core's recordForStep, then liveRecord: a copy or marker newer than this node's view is kept (no view
  // at all, S nil, is the oldest: 0); else the change P is installed on a key with no record of its own,
  // or with none seen an older copy goes and the marker of S takes its place (a marker stays).
  `local function rview(r, P, S, now)
  local c = r and r.id
  if c and (P and version(c) > version(P.id) or not P and version(c) >= (S or 0)) then
  elseif P then
    if not (r and ((not c and r.l) or c == P.id)) then r = {l = P.l, u = P.u, id = P.id, bl = r and r.bl} end
  elseif c and r.l then
    r = {id = format('%d', S) .. '.', bl = r.bl}
  end
  return live_record(r, now)
end
` +
  // core's carried (with debtsAt): the debts at now (fields s, k; reservations due at h) carried to the
  // numbers of nx. Numbers (a key's own, or an older copy) that ended since the bucket's reading go at
  // their end to the change x a step under the view installs, when it was made by then (its version at
  // most their end), else to the base. With a view (S: StepArgs.policySeenUs, 0 for none), a move to
  // x's numbers is counted from when they came in force too (x's version, else S, or the end of the
  // view's change P that x is a copy of, when it has ended: w), nothing refilled
  // from the end of numbers that ended to then; each limit the greater debt. g(i, y, T, W): limit i's debt decayed under
  // the bucket's numbers to T, carried at W to y's, decayed under them to now, carried to nx's.
  `local function rcarry(s, k, n, r, x, nx, now, bt, bc, br, h, S, P)
  local at = k > 1 and s[k] + 0
  local ended = at and live(r, at) and r.u and now >= r.u
  local e = ended and live(x, now) and version(x.id) <= r.u and x or nil
  local mv = ended or (x and x.id) ~= (r and r.id)
  local eu = P and P.u and P.u <= now and x and x.id == P.id and P.u or 0
  local p, q = S, S
  if P then p, q = string.match(P.id, '^%d+%.(%d+)%.(%d+)%.') end
  local cm = at and S and q and (live(r, at) and (mv and r.id and version(r.id) < p + 0) or not live(r, at) and at < q + 0)
  local fz = at and S and (eu > at or cm)
  local t0 = at
  if ended then
    t0 = r.u
    if r.id and cm then t0 = at
    elseif r.id and r.id ~= (x and x.id) then t0 = math.min(r.u, math.max(at, version(x and x.id))) end
  end
  local w = S and at and (mv or fz) and math.min(now, math.max(t0, S, version(x and x.id), eu))
  local d, v, ft, fc, fr, tt, tc, tr = {}
  local function g(i, y, T, W)
    local yt, yc, yr = numbers_at(y, now, i, bt, bc, br)
    return carry(dec(carry(dec(v, at, T, fr), ft, fc, fr, yt, yc, yr, W, h), W, now, yr), yt, yc, yr, tt, tc, tr, now, h)
  end
  for i = 1, n do
    v = 0
    if at and i < k then v = s[i] + 0 end
    ft, fc, fr = numbers_at(r, at or now, i, bt, bc, br)
    tt, tc, tr = numbers_at(nx, now, i, bt, bc, br)
    if ended then d[i] = g(i, e, r.u, r.u)
    else
      local a, b, c = numbers_at(r, now, i, bt, bc, br)
      d[i] = carry(dec(v, at or now, now, fr), a, b, c, tt, tc, tr, now, h)
    end
    if w then d[i] = math.max(d[i], g(i, x, (ended or fz) and t0 or w, w)) end
  end
  return d
end
local function rtext(r)
  if r.s then return r.s end
  local l = ''
  if r.l then l = format(string.rep('%d,', #r.l - 1) .. '%d', unpack(r.l)) end
  local u, bl = '', ''
  if r.u then u = format('%d', r.u) end
  if r.bl then bl = format('%d', r.bl) end
  return l .. '|' .. u .. '|' .. bl .. '|' .. (r.id or '')
end
` +
  // Writes the bucket w (debts at now, in the numbers in force at now: the record r's where live, else
  // the base bt, bc, br; nil: full) and the record r (nil: none) as the key's value, and returns it
  // (false: no key). The expiry keeps the key while the record lives and until the bucket is full
  // under the record's numbers: none while a key's own record has numbers without an end, or while
  // numbers with an end (its own, or a copy's) leave the bucket still spent at it (core keepUntilUs); else at
  // least 1 s, the bucket's full time, and a record's untilUs (a key's own) and blockedUntilUs. A key's copy
  // of a policy-wide change, or a marker, is kept at least \`hold\` ms (StepArgs.policyHoldMs; nil: 0),
  // even with its bucket full, while another node may still step with an older view (core's
  // keepUntilUs). \`pin\`: the record is the policy-wide change itself, or the marker of its revert
  // (setPolicyLimits and clearPolicyLimits on the policy's key), kept for good, past its end too. \`h\`: the
  // bucket's reservation horizon to keep (see horizon; nil: none).
  `local function rsave(key, v, w, n, now, r, bt, bc, br, pin, hold, h)
  local keep = false
  if w then
    for i = 1, n do
      if w[i] > 0 then keep = true end
    end
  end
  if not keep and not r and not (h and w) then
    if v then redis.call('DEL', key) end
    return false
  end
  local ms = 0
  local value = ''
  if keep or (h and w) then
    local f = {}
    for i = 1, n do
      f[i] = w[i]
      local a = w[i]
      if a > 0 then
        local _, _, rate = numbers_at(r, now, i, bt, bc, br)
        local x = a / (rate * 1000)
        if live(r, now) and r.u and a > (r.u - now) * rate then x = 1 / 0 end
        if x > ms then ms = x end
      end
    end
    f[n + 1] = now
    local whole = now % 1 == 0 and now > 0 and now < 1e18
    for i = 1, n do
      if not (f[i] % 1 == 0 and f[i] < 1e18) then whole = false end
    end
    if whole then value = format(string.rep('%d:', n) .. '%d', unpack(f, 1, n + 1))
    else value = format(string.rep('%.0f:', n) .. '%.0f', unpack(f, 1, n + 1)) end
    if h then value = value .. format('~%d', h) end
  end
  if r then
    value = value .. '|' .. rtext(r)
    local own = live(r, now) and (pin or not r.id)
    if (own and not r.u) or (pin and r.id) then ms = 1 / 0 end
    if own and r.u and (r.u - now) / 1000 > ms then ms = (r.u - now) / 1000 end
    if r.id and not pin and hold and hold > ms then ms = hold end
    if r.bl and (r.bl - now) / 1000 > ms then ms = (r.bl - now) / 1000 end
  end
  ms = math.max(1000, ceil(ms))
  if ms == 1 / 0 then
    redis.call('SET', key, value)
    return value
  end
  if ms < 1e18 then ms = format('%d', ms) else ms = format('%.0f', ms) end
  redis.call('SET', key, value, 'PX', ms)
  return value
end
` +
  // core/override.ts stepWithRecord on the key holding v, at now: a step of kind ('t' a take, 'g' a
  // grant of tokenUnits x, 'a' an adjustment refunding since x: applied during a block too, which
  // refuses the others, writing a changed record all the same) of the n limits at A[j ..], with the
  // base B ({maxWaitMs, t1, c1, ...}; nil: not sent), the policy-wide change P ({l, u, id}; nil),
  // without one StepArgs.policySeenUs S (nil: not sent), and StepArgs.policyHoldMs H (rsave's hold; nil:
  // 0). Returns the verdict, the tokens of a grant, and the key's value after. A step that needs the
  // base and was not sent one returns nil (the script refuses it, as core throws).
  `local function rstep(key, v, now, kind, x, j, n, B, P, S, H)
  local b, rec = v, nil
  if v then
    local pb, pr = rparse(v)
    if pb then b, rec = pb, pr end
    if b == '' then b = false end
  end
  local s, k, _, h = fields(b, n)
  if not rec and k > 1 and S and s[k] + 0 < S then s[k] = math.min(S, now) end
  local bt, bc, br = {}, {}, {}
  for i = 1, n do
    br[i] = A[j + 3 * i - 1] + 0
    if B then bt[i], bc[i] = B[2 * i], B[2 * i + 1] end
  end
  local nxt = rec
  if not B then
    if P or (rec and (rec.id or live(rec, now) or (k > 1 and live(rec, s[k] + 0)))) then return nil end
  else
    nxt = rview(live_record(rec, now), P, S, now)
  end
  local d = rcarry(s, k, n, rec, nxt, nxt, now, bt, bc, br, h, S or 0, P)
  if kind ~= 'a' and nxt and nxt.bl and nxt.bl > now then
    if nxt ~= rec then v = rsave(key, v, k > 1 and d, n, now, nxt, bt, bc, br, false, H, horizon(h, now)) end
    if kind == 'g' and A[j] + 0 ~= 0 then return 0, 0, v end
    return 0, nil, v
  end
` +
  // The step's arguments under the numbers in force (core's argsUnder): each limit the record has
  // numbers for gets its cost converted (rounded against the caller; a late refund the lesser of what
  // is left of it under either refill), the wait's cap and the refill of those numbers: the capacity
  // alone for a cost above it, but in an adjustment. K, R: each limit's capacity and refill in force.
  `  local under = live(nxt, now)
  local since = nil
  if kind == 'a' then since = tonumber(x) end
  local C, L, K, R, peek = {}, {}, {}, {}, true
  local unit = tonumber(x)
  for i = 1, n do
    local jj = j + 3 * i - 3
    local c, lim, r = A[jj] + 0, A[jj + 1] + 0, A[jj + 2] + 0
    K[i] = bc[i]
    if under then
      local tt, tc, tr, rec_i = numbers_at(nxt, now, i, bt, bc, br)
      if i == 1 then unit = tt end
      K[i] = tc
      local late = c < 0 and since
      if rec_i or late then
        local cc = conv(c, bt[i], tt, c >= 0)
        if late then cc = -math.min(conv(back(c, r, since, now), bt[i], tt, false), back(cc, tr, since, now)) end
        if rec_i then
          if B[1] == 0 or (kind ~= 'a' and cc > tc) then lim = tc else lim = math.min(MAXL, tc + B[1] * tr * 1000) end
          r = tr
        end
        c = cc
      end
    end
    if c ~= 0 then peek = false end
    if not under and c < 0 and since then c = -back(c, r, since, now) end
    C[i], L[i], R[i] = c, lim, r
  end
` +
  // core's step on the debts now: a take (all or nothing), a grant, or an adjustment; every cost 0 a peek.
  // A reservation on several limits is charged on each limit it charged as a take when it comes (see take).
  `  local after, tokens, allowed, w = {}, nil, 1, nil
  if kind == 'g' then
    if C[1] ~= 0 then
      local room = L[1] - d[1]
      local q = fdiv(room, unit)
      if q > C[1] / unit then q = C[1] / unit end
      if q < 0 then q = 0 end
      tokens = q
      if q == 0 then allowed = 0 else after[1] = d[1] + q * unit end
    end
  else
    for i = 1, n do
      local c, a = C[i], d[i]
      if kind == 'a' then
        if c < 0 then
          a = math.max(0, a + c)
          if h and h > now - 1000 then a = math.max(a, math.min(d[i], (h - now) * R[i] + K[i])) end
        elseif a + c > L[i] then a = math.max(a, L[i]) else a = a + c end
      else
        if c < 0 then a = math.max(0, a + c) else a = a + c end
        if c > 0 and a > L[i] then allowed = 0 end
      end
      after[i] = a
    end
  end
  local wait = 0
  if allowed == 1 and not peek then
    for i = 1, n do
      if after[i] > 0 or k > 1 then w = after end
      if kind == 't' and B and C[i] > 0 then wait = due(wait, after[i] - K[i], R[i]) end
    end
    for i = 1, n do
      local x = math.min(MAXL, wait * R[i] + C[i])
      if n > 1 and wait > 0 and C[i] > 0 and x > after[i] then after[i] = x end
    end
    if wait > 0 then wait = now + wait end
  end
  local changed = nxt ~= rec
  if not w and changed and k > 1 then w = d end
  if not w and not changed then return allowed, tokens, v end
  local r = rec
  if changed then r = nxt end
  return allowed, tokens, rsave(key, v, w, n, now, r, bt, bc, br, false, H, horizon(h, now, wait))
end
`;
