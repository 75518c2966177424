-- Prepended (after `waiter_channel.lua`) to the scripts of semaphores and
-- read-write locks (see `layout`): the holds of a name live in a hash `H`
-- and their lease ends in a sorted set `Z` (hold id -> server time in ms).
-- A hold id is a permit's token, `w` for the writer, or `r` .. OWNER for a
-- reader. Fields of `H`: `o|X` owner, `t|X` token, `a|X` the attempt ids of
-- X's shares (16 hex digits each, one after the other: the hold count is
-- their number), `g|X` when it was granted (for the order), `p|w` the last
-- write token before the writer's (for an undo), `a:ID` the hold of
-- attempt ID, `q:ID` the place in line attempt ID took its entry from
-- (for an undo), `n` a semaphore's permit count, `s|K` the permit holding slot
-- K (Redlock; the slot is free again once that hold is gone), `k|X` the
-- slot permit X stands in, `g` the
-- grant counter, `lw` a read-write lock's last write token. The line is a
-- sorted set `Q` of entries (see `member`), `T` the entries told their
-- turn (entry -> server time in ms) until their client tries, and those
-- whose client tried and was not let in (entry -> `a`).

-- Whether `T` still has entries told their turn that have not come.
local function awaited(T)
  for _, v in ipairs(redis.call('HVALS', T)) do
    if tonumber(v) then return true end
  end
  return false
end

local function fmt(n)
  return string.format('%.0f', n)
end

-- Drops the holds whose lease ended by `now`; returns how many.
local function purge(H, Z, now)
  local gone = redis.call('ZRANGEBYSCORE', Z, '-inf', fmt(now))
  for _, x in ipairs(gone) do
    local ids = redis.call('HGET', H, 'a|' .. x) or ''
    for i = 1, #ids, 16 do
      local id = string.sub(ids, i, i + 15)
      redis.call('HDEL', H, 'a:' .. id, 'q:' .. id)
    end
    redis.call('HDEL', H, 'o|' .. x, 't|' .. x, 'a|' .. x, 'g|' .. x, 'p|' .. x, 'k|' .. x)
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', Z, '-inf', fmt(now)) end
  return #gone
end

-- The id of the live hold of `kind` (`p`, `r`, `w`) by `owner` under
-- `token`, or nil; and its lease end. A read hold is its owner's whatever
-- its token: on Redlock each node's reader carries that node's last write,
-- which differs where a writer's quorum left the node out, and the guard
-- carries the greatest of them.
local function hold_of(H, Z, kind, owner, token, now)
  local x = kind == 'p' and token or (kind == 'w' and 'w' or 'r' .. owner)
  local h = redis.call('HMGET', H, 'o|' .. x, 't|' .. x)
  local ends = tonumber(redis.call('ZSCORE', Z, x) or '0')
  if h[1] == owner and (h[2] == token or kind == 'r') and ends > now then return x, ends end
  return nil
end

-- The keys' expiries after a change: `Z` ends with the last lease, `H` a
-- minute later (its counters, and a semaphore's count while clients
-- queue), or never once it keeps a write token.
local function settle(H, Z, now)
  local last = redis.call('ZRANGE', Z, -1, -1, 'WITHSCORES')
  local left = 0
  if last[1] then
    left = math.max(tonumber(last[2]) - now, 1)
    redis.call('PEXPIRE', Z, fmt(left))
  else
    redis.call('DEL', Z)
  end
  if redis.call('HEXISTS', H, 'lw') == 1 then
    redis.call('PERSIST', H)
  else
    redis.call('PEXPIRE', H, fmt(left + 60000))
  end
end

-- How many entries of a line one admission looks at, and tells, at most.
local LINE_SCAN = 100

-- How long (ms) a client told its turn has to come before a fallback
-- attempt may drop it from the line: less than the waiters' FALLBACK (in
-- `wait`), after which a fallback attempt comes, so that its sweep finds it.
local TURN_GRACE = 150

-- A line's entry for client `waiter` asking for `kind`: its id, or, for a
-- read-write lock's writers, its id and `:w` (a client waiting to read and
-- to write stands in line twice, each at the place its first waiter of
-- that kind came).
local function member(waiter, kind)
  if kind == 'w' then return waiter .. ':w' end
  return waiter
end

-- Whether entry `m` waits to write.
local function writes(m)
  return string.sub(m, -2) == ':w'
end

-- The client of entry `m`.
local function client_of(m)
  if writes(m) then return string.sub(m, 1, -3) end
  return m
end

-- Takes entry `m` out of line `Q` (dead, or its turn passed) and out of
-- `T` (told its turn).
local function drop(Q, T, m)
  redis.call('ZREM', Q, m)
  redis.call('HDEL', T, m)
end

-- The entries at the front of line `Q` that the holds in `Z` let in now
-- (at most LINE_SCAN): `lockkit_core::raw::admitted`, in Lua. `kind` `p`
-- (a semaphore of `permits`: the first permits - held), else a read-write
-- lock (nobody beside a writer, a writer first in line once nobody holds,
-- else every reader before the first writer).
local function admitted(Z, Q, kind, permits)
  local holds = redis.call('ZCARD', Z)
  if kind == 'p' then
    local free = math.min(permits - holds, LINE_SCAN)
    if free <= 0 then return {} end
    return redis.call('ZRANGE', Q, 0, free - 1)
  end
  if redis.call('ZSCORE', Z, 'w') then return {} end
  local out = {}
  for i, m in ipairs(redis.call('ZRANGE', Q, 0, LINE_SCAN - 1)) do
    if writes(m) then
      if i == 1 and holds == 0 then out[1] = m end
      break
    end
    out[#out + 1] = m
  end
  return out
end

-- Tells the entries the line admits now that their turn has come — those
-- not told yet, and, with `retell` (a change: a hold that went, a grant, a
-- client that left), those whose client came since and was not let in
-- (marked `a` in `T`: a Redlock node whose holds differ from the others'
-- may admit a client the quorum does not) — `kNONCE|ENTRY`
-- on the client's own channel of `H`, with `cmd` (`PUBLISH`/`SPUBLISH`;
-- '': nobody is told). Nobody else hears of it — a change wakes only those
-- it lets in. A client whose channel nobody listens on is gone (its
-- process died and the server closed its connection) and leaves the line
-- at once. The first entry after the admitted ones hears whose turn it is
-- (`kNONCE|ENTRY` naming the first told), to drop them after the fallback
-- delay should they not come (see `sweep`). `nonce` is the same on every
-- Redlock node, so a client hears one turn once however many nodes tell
-- it. Returns the message naming every entry told (`kNONCE|ENTRY ENTRY
-- …`, for the releasing process's own waiters) or nil, and how many
-- entries the line admits.
local function admit(H, Z, Q, T, kind, permits, cmd, at, nonce, retell)
  if cmd == '' or redis.call('EXISTS', Q) == 0 then return nil, 0 end
  local now = now_ms()
  local told = {}
  local adm = {}
  for _ = 1, LINE_SCAN do
    adm = admitted(Z, Q, kind, permits)
    local gone = false
    for _, m in ipairs(adm) do
      local mark = redis.call('HGET', T, m)
      if not mark or (retell and mark == 'a') then
        if redis.pcall(cmd, waiter_channel(H, at, client_of(m)), 'k' .. nonce .. '|' .. m) == 0 then
          drop(Q, T, m)
          gone = true
          break
        end
        redis.call('HSET', T, m, now)
        told[#told + 1] = m
      end
    end
    if not gone then break end
  end
  if not told[1] then return nil, #adm end
  local keep = redis.call('PTTL', Q)
  if keep > 0 then redis.call('PEXPIRE', T, keep) end
  for _ = 1, 3 do
    local watcher = redis.call('ZRANGE', Q, #adm, #adm)[1]
    if not watcher then break end
    local channel = waiter_channel(H, at, client_of(watcher))
    if redis.pcall(cmd, channel, 'k' .. nonce .. '|' .. told[1]) ~= 0 then break end
    drop(Q, T, watcher)
  end
  return 'k' .. nonce .. '|' .. table.concat(told, ' '), #adm
end

-- A fallback attempt's duty: drops from the line every entry told its
-- turn at least TURN_GRACE ms ago that has not come since (dead, frozen,
-- or starved: a live one joins again at the back with its next attempt).
-- Returns how many it dropped.
local function sweep(Q, T, now)
  local t = redis.call('HGETALL', T)
  local dropped = 0
  for i = 1, #t, 2 do
    local told = tonumber(t[i + 1])
    if told and now - told >= TURN_GRACE then
      drop(Q, T, t[i])
      dropped = dropped + 1
    end
  end
  return dropped
end

-- A semaphore's permit count, as its holds key keeps it.
local function permits_of(H)
  return tonumber(redis.call('HGET', H, 'n') or '1')
end

-- Takes attempt `att`'s share out of hold `x` (if it is there): the shares
-- left, and whether the hold went with the last one.
local function take_share(H, Z, x, att)
  local ids = redis.call('HGET', H, 'a|' .. x) or ''
  local at = nil
  for i = 1, #ids, 16 do
    if string.sub(ids, i, i + 15) == att then at = i end
  end
  if not at then return #ids / 16, false end
  ids = string.sub(ids, 1, at - 1) .. string.sub(ids, at + 16)
  redis.call('HDEL', H, 'a:' .. att, 'q:' .. att)
  if #ids > 0 then
    redis.call('HSET', H, 'a|' .. x, ids)
    return #ids / 16, false
  end
  redis.call('HDEL', H, 'o|' .. x, 't|' .. x, 'a|' .. x, 'g|' .. x, 'p|' .. x, 'k|' .. x)
  redis.call('ZREM', Z, x)
  return 0, true
end
