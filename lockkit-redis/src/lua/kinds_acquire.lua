local H, Z, Q, F = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local owner, ttl, att, waiter, kind = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[5], ARGV[11]
local fair = string.find(ARGV[6], 'f', 1, true) ~= nil
local joins = waiter ~= '' and string.find(ARGV[6], 'w', 1, true) ~= nil
local now = now_ms()
purge(H, Z, now)
if kind == 'p' then
  -- The count is the name's while it has holds or clients queue.
  local n = redis.call('HGET', H, 'n')
  if n and n ~= ARGV[12] and (redis.call('ZCARD', Z) > 0 or redis.call('EXISTS', Q) == 1) then
    return {-1, n}
  end
end

-- The caller's hold `x` as it is now, its lease at least `ttl` from now
-- (a repeat writes the lease it has: a WAIT after it covers the hold).
local function held(x, share)
  local ends = math.max(tonumber(redis.call('ZSCORE', Z, x)), now + ttl)
  redis.call('ZADD', Z, 'XX', fmt(ends), x)
  settle(H, Z, now)
  local h = redis.call('HMGET', H, 't|' .. x, 'a|' .. x)
  return {1, h[1], #h[2] / 16, ends - now, share}
end

local repeated = redis.call('HGET', H, 'a:' .. att)
if repeated and redis.call('ZSCORE', Z, repeated) then return held(repeated, 'p') end

-- A waiting caller takes its place in line (a writer says so in `F`); a
-- client given its turn that let it pass (ARGV[7]: dead, or gone) is
-- dropped below, if it still heads the line of a name free for it.
local function place()
  if ARGV[9] ~= '' then return ARGV[9] end
  local t = redis.call('TIME')
  return fmt(tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
if joins then
  -- (A line never stands without an expiry: its clients may all die.)
  redis.call('ZADD', Q, 'NX', place(), waiter)
  redis.call('PEXPIRE', Q, 60000, 'NX')
  if kind == 'w' then
    redis.call('HSET', F, waiter, '1')
    redis.call('PEXPIRE', F, 60000, 'NX')
  end
  if kind == 'p' then redis.call('HSET', H, 'n', ARGV[12]) end
end
local holds = redis.call('ZCARD', Z)
local permits = tonumber(ARGV[12])
-- Redlock: a permit takes slot ARGV[13] of the N (`''`: any). A slot is
-- taken while the hold recorded in it stands.
local slot = ARGV[13] or ''
local function slot_free(s)
  local x = redis.call('HGET', H, 's|' .. s)
  return not x or not redis.call('ZSCORE', Z, x)
end
-- Whether the first in line could take it now.
local function free_for_line()
  if kind == 'p' then return holds < permits end
  return holds == 0
end
-- Who in line is in the caller's way: a writer ahead of a reader (fair or
-- not), the head for the others (fair only).
local function in_the_way()
  if kind == 'r' then
    local rank = waiter ~= '' and redis.call('ZRANK', Q, waiter) or false
    if rank == 0 then return nil end
    for _, m in ipairs(redis.call('ZRANGE', Q, 0, rank and rank - 1 or -1)) do
      if redis.call('HEXISTS', F, m) == 1 then return m end
    end
    return nil
  end
  if not fair then return nil end
  local head = redis.call('ZRANGE', Q, 0, 0)[1]
  if head and head ~= waiter then return head end
  return nil
end
local blocker = in_the_way()
local woke = false
if blocker and ARGV[7] ~= '' and free_for_line() and redis.call('ZRANGE', Q, 0, 0)[1] == ARGV[7] then
  redis.call('ZREM', Q, ARGV[7])
  redis.call('HDEL', F, ARGV[7])
  wake(H, ARGV[8])
  woke = true
  blocker = in_the_way()
end

-- What to do: `new` hold, join hold `x`, or busy.
local new, x = false, nil
local writer = redis.call('ZSCORE', Z, 'w') and redis.call('HGET', H, 'o|w')
if kind == 'p' then
  new = not blocker and holds < permits and (slot == '' or slot_free(slot))
elseif kind == 'r' then
  if redis.call('ZSCORE', Z, 'r' .. owner) then
    x = 'r' .. owner
  elseif writer then
    new = writer == owner
  else
    new = not blocker
  end
else
  if writer then
    if writer == owner then x = 'w' end
  elseif redis.call('ZSCORE', Z, 'r' .. owner) then
    return {-2}
  else
    new = holds == 0 and not blocker
  end
end

if not new and not x then
  if blocker and free_for_line() then
    local head = redis.call('ZRANGE', Q, 0, 0)[1]
    local rank = joins and redis.call('ZRANK', Q, waiter) or false
    return {0, '', 0, -2, head, rank and math.max(rank - 1, 0) or 0}
  end
  local first = redis.call('ZRANGE', Z, 0, 0, 'WITHSCORES')
  local pttl = first[1] and (tonumber(first[2]) - now) or -1
  if joins then
    local keep = fmt(math.max(pttl, 0) + 60000)
    redis.call('PEXPIRE', Q, keep)
    if kind == 'w' then redis.call('PEXPIRE', F, keep) end
    settle(H, Z, now)
  end
  -- Free here, but not the slot asked for: the lowest that is.
  if kind == 'p' and slot ~= '' and not blocker and holds < permits then
    for s = 0, permits - 1 do
      if slot_free(s) then return {2, s} end
    end
  end
  return {0, '', 0, pttl}
end

-- Granted: out of line (or to its back, when more of the client's
-- waiters wait).
if joins then
  if string.find(ARGV[6], 'k', 1, true) then
    redis.call('ZADD', Q, 'XX', place(), waiter)
  else
    redis.call('ZREM', Q, waiter)
  end
  redis.call('HDEL', F, waiter)
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
  if kind == 'p' and slot ~= '' then redis.call('HSET', H, 's|' .. slot, x) end
  redis.call('ZADD', Z, fmt(now + ttl), x)
  holds = holds + 1
end
-- Another permit or reader may go too: the line looks again.
if not woke and redis.call('EXISTS', Q) == 1 then
  local head = redis.call('ZRANGE', Q, 0, 0)[1]
  if (kind == 'p' and holds < permits) or (kind == 'r' and redis.call('HEXISTS', F, head) == 0) then
    wake(H, ARGV[8])
  end
end
return held(x, share)
