-- Prepended to the scripts of semaphores and read-write locks (see
-- `layout`): the holds of a name live in a hash `H` and their lease ends in
-- a sorted set `Z` (hold id -> server time in ms). A hold id is a permit's
-- token, `w` for the writer, or `r` .. OWNER for a reader. Fields of `H`:
-- `o|X` owner, `t|X` token, `a|X` the attempt ids of X's shares (16 hex
-- digits each, one after the other: the hold count is their number), `g|X`
-- when it was granted (for the order), `p|w` the last write token before
-- the writer's (for an undo), `a:ID` the hold of attempt ID,
-- `n` a semaphore's permit count, `s|K` the permit holding slot K
-- (Redlock; the slot is free again once that hold is gone), `g` the grant
-- counter, `m` the message counter, `lw` a read-write lock's last write
-- token.

local function fmt(n)
  return string.format('%.0f', n)
end

-- The server's time in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drops the holds whose lease ended by `now`.
local function purge(H, Z, now)
  local gone = redis.call('ZRANGEBYSCORE', Z, '-inf', fmt(now))
  for _, x in ipairs(gone) do
    local ids = redis.call('HGET', H, 'a|' .. x) or ''
    for i = 1, #ids, 16 do
      redis.call('HDEL', H, 'a:' .. string.sub(ids, i, i + 15))
    end
    redis.call('HDEL', H, 'o|' .. x, 't|' .. x, 'a|' .. x, 'g|' .. x, 'p|' .. x)
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', Z, '-inf', fmt(now)) end
end

-- The id of the live hold of `kind` (`p`, `r`, `w`) by `owner` under
-- `token`, or nil; and its lease end.
local function hold_of(H, Z, kind, owner, token, now)
  local x = kind == 'p' and token or (kind == 'w' and 'w' or 'r' .. owner)
  local h = redis.call('HMGET', H, 'o|' .. x, 't|' .. x)
  local ends = tonumber(redis.call('ZSCORE', Z, x) or '0')
  if h[1] == owner and h[2] == token and ends > now then return x, ends end
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

-- Tells every client listening on the name's channel `H` to look again
-- (`cmd`: `PUBLISH`/`SPUBLISH`; '': nobody). Returns the message: unique,
-- so that no listener drops it as a repeat.
local function wake(H, cmd)
  if cmd == '' then return nil end
  local t = redis.call('TIME')
  local m = 'k' .. t[1] .. t[2] .. '.' .. redis.call('HINCRBY', H, 'm', 1) .. '|'
  redis.pcall(cmd, H, m)
  return m
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
  redis.call('HDEL', H, 'a:' .. att)
  if #ids > 0 then
    redis.call('HSET', H, 'a|' .. x, ids)
    return #ids / 16, false
  end
  redis.call('HDEL', H, 'o|' .. x, 't|' .. x, 'a|' .. x, 'g|' .. x, 'p|' .. x)
  redis.call('ZREM', Z, x)
  return 0, true
end
