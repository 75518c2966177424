local H, Z, Q, T = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local owner, ttl, att, waiter, kind = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[5], ARGV[11]
-- KEYS[8], with the restart guard on: its marker.
if KEYS[8] then
  local refused = guard(KEYS[8], ttl)
  if refused then return refused end
end
local fair = string.find(ARGV[6], 'f', 1, true) ~= nil
local joins = waiter ~= '' and string.find(ARGV[6], 'w', 1, true) ~= nil
local me = member(waiter, kind)
local cmd, at, nonce = ARGV[8], tonumber(ARGV[10]), ARGV[14]
local now = now_ms()
-- Whether this call changed what the line is let in to (holds that ran
-- out, clients dropped): a refused attempt tells the line only then.
local changed = purge(H, Z, now) > 0
if kind == 'p' then
  -- The count is the name's while it has holds or clients queue.
  local n = redis.call('HGET', H, 'n')
  if n and n ~= ARGV[12] and (redis.call('ZCARD', Z) > 0 or redis.call('EXISTS', Q) == 1) then
    return {-1, n}
  end
end

-- The caller's hold `x` as it is now, its lease at least `ttl` from now
-- (a repeat writes the lease it has: a WAIT after it covers the hold);
-- `told`, the clients this call told their turn.
-- A Redlock permit's reply names the slot it stands in (-1: none).
local function held(x, share, told)
  local ends = math.max(tonumber(redis.call('ZSCORE', Z, x)), now + ttl)
  redis.call('ZADD', Z, 'XX', fmt(ends), x)
  settle(H, Z, now)
  local h = redis.call('HMGET', H, 't|' .. x, 'a|' .. x, 'k|' .. x)
  if kind ~= 'p' then return {1, h[1], #h[2] / 16, ends - now, share, told} end
  return {1, h[1], #h[2] / 16, ends - now, share, tonumber(h[3] or '-1'), told}
end

local repeated = redis.call('HGET', H, 'a:' .. att)
if repeated and redis.call('ZSCORE', Z, repeated) then return held(repeated, 'p') end

-- A waiting caller takes its place in line (as a writer or not), and is
-- no longer owed a turn it was told of: it came. A fallback attempt
-- (ARGV[7]: the client it saw given the turn) drops the clients told
-- their turn that did not come.
local function place()
  if ARGV[9] ~= '' then return ARGV[9] end
  return fmt(now_us())
end
local was_told = false
if joins then
  was_told = tonumber(redis.call('HGET', T, me) or '') ~= nil
  redis.call('HSET', T, me, 'a')
  -- (A line never stands without an expiry: its clients may all die.)
  -- A place the caller gives (Redlock: its client's, the same for every
  -- node) is its place here too when it is later than the node's: the
  -- nodes' lines agree again after a move to the back one of them missed.
  -- Never earlier: a waiter that set out before a sibling's grant sent
  -- the client to the back carries the old place, and would bring the
  -- client forward again on the nodes it reaches after that grant, not
  -- on the others — lines that disagree, and turns no quorum agrees on.
  if ARGV[9] ~= '' then
    -- An entry that moves back may let in those it stood before.
    local was = tonumber(redis.call('ZSCORE', Q, me) or '')
    redis.call('ZADD', Q, 'GT', ARGV[9], me)
    if was and was < tonumber(ARGV[9]) then changed = true end
  else
    redis.call('ZADD', Q, 'NX', place(), me)
  end
  redis.call('PEXPIRE', Q, 60000, 'NX')
  if kind == 'p' then redis.call('HSET', H, 'n', ARGV[12]) end
end
if ARGV[7] ~= '' and sweep(Q, T, now) > 0 then changed = true end
local holds = redis.call('ZCARD', Z)
local permits = tonumber(ARGV[12])
-- Redlock: a permit takes slot ARGV[13] of the N (`''`: any; `*`: the
-- slot this node assigns, `entitled_slot`). A slot is taken while the hold
-- recorded in it stands.
local slot = ARGV[13] or ''
local assigned = slot == '*'
local function slot_free(s)
  local x = redis.call('HGET', H, 's|' .. s)
  return not x or not redis.call('ZSCORE', Z, x)
end
-- Whether the line lets the caller in: a waiting caller among the clients
-- it admits; one not in line only to what is free beyond them. A reader
-- passes no writer in line, fair or not; other unfair callers pass
-- anybody.
local line = admitted(Z, Q, kind, permits)
local function my_turn()
  if not fair and kind ~= 'r' then return true end
  if joins then
    for _, id in ipairs(line) do
      if id == me then return true end
    end
    return false
  end
  local queued = redis.call('ZCARD', Q)
  if kind == 'p' then return permits - holds > queued and (slot == '' or queued == 0) end
  if kind == 'w' then return queued == 0 end
  return #line == queued and (queued == 0 or not writes(line[1]))
end
local turn = my_turn()
-- Redlock: the slot to name to a caller whose slot is taken here, the
-- same on every node that agrees on the line and the holds: the r-th free
-- slot, r its place among the entries let in (after them, for a caller not
-- in line) — so that permits let in together are sent to different slots,
-- not all to the same lowest one. (Any free slot asked for is taken.)
local function entitled_slot()
  local r = #line
  if joins then
    for i, id in ipairs(line) do
      if id == me then r = i - 1 end
    end
  end
  local seen = 0
  for s = 0, permits - 1 do
    if slot_free(s) then
      if seen == r then return s end
      seen = seen + 1
    end
  end
  return nil
end

-- What to do: `new` hold, join hold `x`, or busy.
local new, x = false, nil
local writer = redis.call('ZSCORE', Z, 'w') and redis.call('HGET', H, 'o|w')

-- The last write token a refused reader learns (Redlock: a reader's token
-- is the greatest any answering node has). A writer's share here whose
-- quorum a reader can still get elsewhere never stood: it is a failed
-- attempt's, not yet undone, so the reader learns the write before it.
local function told_last_write()
  if writer then
    local before = redis.call('HGET', H, 'p|w')
    if before then return before end
  end
  return redis.call('HGET', H, 'lw') or ''
end
if kind == 'p' then
  if assigned then slot = (turn and holds < permits and entitled_slot()) or '*' end
  new = turn and holds < permits and slot ~= '*' and (slot == '' or slot_free(slot))
elseif kind == 'r' then
  if redis.call('ZSCORE', Z, 'r' .. owner) then
    x = 'r' .. owner
  elseif writer then
    new = writer == owner
  else
    new = turn
  end
else
  if writer then
    if writer == owner then x = 'w' end
  elseif redis.call('ZSCORE', Z, 'r' .. owner) then
    return {-2}
  else
    new = holds == 0 and turn
  end
end

-- One name, one lock: a new hold waits while the name's mutex (KEYS[6])
-- or the holds of its other kind (lease ends in KEYS[7]) stand.
if new then
  local left = other_kind_left(KEYS[6], {KEYS[7]}, now)
  if left > 0 then
    if joins then redis.call('PEXPIRE', Q, fmt(left + 60000)) end
    return {0, kind == 'r' and told_last_write() or '', 0, math.min(left, ONE_NAME_RECHECK)}
  end
end

if not new and not x then
  local reply
  if line[1] and not turn then
    -- Free for the line, not for the caller: whose turn it is, and how
    -- many wait between the clients let in and the caller.
    local rank = joins and redis.call('ZRANK', Q, me) or false
    reply = {0, '', 0, -2, line[1], rank and math.max(rank - #line, 0) or 0}
  else
    local first = redis.call('ZRANGE', Z, 0, 0, 'WITHSCORES')
    reply = {0, '', 0, first[1] and (tonumber(first[2]) - now) or -1}
  end
  if kind == 'r' then reply[2] = told_last_write() end
  if joins then
    local keep = fmt(math.max(reply[4], 0) + 60000)
    redis.call('PEXPIRE', Q, keep)
    settle(H, Z, now)
  end
  -- Free here, but not the slot asked for: the one the caller is to take.
  if kind == 'p' and slot ~= '' and turn and holds < permits then
    local s = entitled_slot()
    if s then return {2, s} end
  end
  -- A hold that ran out, or a client dropped, may have let others in; and
  -- the line may let in clients nobody told yet (a change on another node,
  -- on Redlock). Not otherwise: a node whose holds differ from the other
  -- nodes' would tell its clients again at every refused attempt, and they
  -- would attempt again, round and round.
  if changed or (line[1] and not turn) then admit(H, Z, Q, T, kind, permits, cmd, at, nonce, changed) end
  return reply
end

-- Granted: out of line (or to its back, when more of the client's
-- waiters of this kind wait; or, when more of its readers let in by this
-- turn come, where it is, its turn still running: told, so that it is not
-- told again, and dropped if they do not come).
-- The back of the line is the caller's time (ARGV[15], Redlock: the same
-- on every node, so that their lines agree) or the server's.
local was_at = joins and redis.call('ZSCORE', Q, me)
if joins and string.find(ARGV[6], 's', 1, true) then
  redis.call('HSET', T, me, now)
elseif joins then
  redis.call('HDEL', T, me)
  if string.find(ARGV[6], 'k', 1, true) then
    local back = ARGV[15]
    if not back or back == '' then back = fmt(now_us()) end
    redis.call('ZADD', Q, 'XX', back, me)
  else
    redis.call('ZREM', Q, me)
  end
end
local share = 'n'
if x then
  redis.call('HSET', H, 'a|' .. x, redis.call('HGET', H, 'a|' .. x) .. att, 'a:' .. att, x)
  share = 'r'
else
  local token
  if kind == 'r' then
    token = redis.call('HGET', H, 'lw') or '0'
    x = 'r' .. owner
  else
    token = next_token(KEYS[3], ARGV[4])
    x = kind == 'w' and 'w' or token
    if kind == 'w' then
      redis.call('HSET', H, 'p|w', redis.call('HGET', H, 'lw') or '', 'lw', token)
    end
    if kind == 'p' then redis.call('HSET', H, 'n', ARGV[12]) end
  end
  local g = redis.call('HINCRBY', H, 'g', 1)
  redis.call('HSET', H, 'o|' .. x, owner, 't|' .. x, token, 'a|' .. x, att, 'g|' .. x, g, 'a:' .. att, x)
  if kind == 'p' and slot ~= '' then redis.call('HSET', H, 's|' .. slot, x, 'k|' .. x, slot) end
  redis.call('ZADD', Z, fmt(now + ttl), x)
end
-- Where the entry stood, should this attempt be undone (Redlock).
if was_at then redis.call('HSET', H, 'q:' .. att, was_at) end
-- Another permit or reader may go too (this client again, when more of
-- its waiters wait): the clients let in now hear it. Once every client
-- told its turn has come, the first after them need not watch any more.
local told, admits = admit(H, Z, Q, T, kind, permits, cmd, at, nonce, true)
if was_told and cmd ~= '' and not awaited(T) then
  local watcher = redis.call('ZRANGE', Q, admits, admits)[1]
  if watcher and watcher ~= me then redis.pcall(cmd, waiter_channel(H, at, client_of(watcher)), '+') end
end
return held(x, share, told)
