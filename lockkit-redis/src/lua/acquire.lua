local ttl = tonumber(ARGV[2])
-- KEYS[7], with the restart guard on: its marker.
if KEYS[7] then
  local refused = guard(KEYS[7], ttl)
  if refused then return refused end
end
-- A refusal while a semaphore's or read-write lock's holds (the lease ends
-- in KEYS[5] and KEYS[6]) stand on the name, or nil.
local function other_kind()
  local left = other_kind_left('', {KEYS[5], KEYS[6]}, now_ms())
  if left > 0 then return {0, '', 0, math.min(left, ONE_NAME_RECHECK)} end
  return nil
end
-- The token, once drawn, and the server's TIME it was drawn at.
local ts, now = nil, nil
if ARGV[5] == '' then
  -- Not in line (a first try): a name nobody holds or waits for is taken
  -- by one SET that fails when the key exists (held, or `FREE`: a line
  -- waits); else the rules below.
  local refused = other_kind()
  if refused then return refused end
  ts, now = next_token(KEYS[2], ARGV[4])
  if redis.call('SET', KEYS[1], '2|' .. ts .. '|1||' .. ARGV[3] .. ':1,|' .. ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1, ts, 1, ttl, 'n'}
  end
end
local v = redis.call('GET', KEYS[1])
local h = parse(KEYS[1], v)
-- Tells waiting client `id` (not the caller) `m`, on its own channel; a
-- client nobody listens for leaves the queue.
local function tell(id, m)
  if id and id ~= ARGV[5] then
    tell_or_drop(ARGV[8], KEYS[1], tonumber(ARGV[10]), KEYS[3], id, m)
  end
end
-- A waiter's place in the queue: the caller's (ARGV[9]) or the server's time.
local function place()
  if ARGV[9] ~= '' then return ARGV[9] end
  return string.format('%.0f', now_us())
end
if not h then
  -- Whether clients queue for this name (nil: not looked at yet).
  local queued = nil
  -- The queue after the caller: known when a fair caller at its head takes.
  local after = nil
  if string.find(ARGV[6], 'f', 1, true) then
    -- Fair: a free name is the queue head's. A waiting caller takes its
    -- place first (it may have left this queue by taking the lock here in an
    -- attempt that failed on other nodes: Redlock); then a head that was
    -- given its turn and let it pass (ARGV[7]: dead, or gone; told its turn
    -- here at least ARGV[12] ms ago) is dropped.
    if ARGV[5] ~= '' and string.find(ARGV[6], 'w', 1, true) then
      if redis.call('ZADD', KEYS[3], 'NX', place(), ARGV[5]) == 1 then
        redis.call('PEXPIRE', KEYS[3], 60000)
      end
    end
    local q = redis.call('ZRANGE', KEYS[3], 0, 2)
    if q[1] and q[1] == ARGV[7] and had_turn(KEYS[4], q[1], tonumber(ARGV[12])) then
      redis.call('ZREM', KEYS[3], q[1])
      q = redis.call('ZRANGE', KEYS[3], 0, 1)
      if q[1] and q[1] ~= ARGV[5] and ARGV[8] ~= '' then
        -- Tell the next in line that it is its turn now, and the one after
        -- it (to drop it in turn, should it not come either).
        local now = redis.call('TIME')
        announce(ARGV[8], KEYS[1], tonumber(ARGV[10]), KEYS[3], ARGV[5], 's' .. now[1] .. now[2], KEYS[4])
      end
      q = redis.call('ZRANGE', KEYS[3], 0, 2)
    end
    if q[1] and q[1] ~= ARGV[5] then
      -- How many wait between the head and the caller (0: next in line).
      local rank = ARGV[5] ~= '' and redis.call('ZRANK', KEYS[3], ARGV[5]) or false
      return {0, '', 0, -2, q[1], rank and math.max(rank - 1, 0) or 0}
    end
    queued = q[1] ~= nil
    if q[1] and ARGV[7] == '' then after = {q[2], q[3]} end
  end
  if ARGV[5] ~= '' then
    local refused = other_kind()
    if refused then return refused end
  end
  if not ts then ts, now = next_token(KEYS[2], ARGV[4]) end
  -- Clients queued for the last hold still wait: mark this one for them.
  if ARGV[8] == '' then
    queued = false
  elseif queued == nil then
    queued = redis.call('EXISTS', KEYS[3]) == 1
  end
  -- The share records where the caller's entry stood, for an undo (`1`:
  -- not in line, or not moved).
  local was_at = queued and ARGV[5] ~= '' and redis.call('ZSCORE', KEYS[3], ARGV[5]) or '1'
  redis.call('SET', KEYS[1], format({t = ts, c = 1, w = queued, s = ARGV[3] .. ':' .. was_at .. ',', o = ARGV[1]}),
    'PX', ARGV[2])
  if queued then
    -- A turn told on the free name is over.
    redis.call('DEL', KEYS[4])
    if ARGV[7] ~= '' then redis.call('ZREM', KEYS[3], ARGV[7]) end
    if ARGV[5] ~= '' then
      if string.find(ARGV[6], 'k', 1, true) then
        -- More of this client's waiters wait: to the back of the line, at
        -- the caller's time (ARGV[11], Redlock: the same on every node, so
        -- that their lines agree) or the server's.
        local back = ARGV[11]
        if not back or back == '' then
          back = string.format('%.0f', tonumber(now[1]) * 1000000 + tonumber(now[2]))
        end
        redis.call('ZADD', KEYS[3], 'XX', back, ARGV[5])
      else
        redis.call('ZREM', KEYS[3], ARGV[5])
      end
    end
    -- Taken: the next in line need not drop the last head after all (and,
    -- when the caller barged in, neither need the one after it).
    local q = after or redis.call('ZRANGE', KEYS[3], 0, 1)
    tell(q[1], '+')
    if not string.find(ARGV[6], 'f', 1, true) then tell(q[2], '+') end
  end
  return {1, ts, 1, ttl, 'n'}
end
if h.o == ARGV[1] then
  local kind = 'p'
  if not share_of(h, ARGV[3]) then
    h.c, h.s, kind = h.c + 1, h.s .. ARGV[3] .. ':1,', 'r'
  end
  -- Written even for a repeat, which changes nothing: a WAIT after it then
  -- covers the hold (replicas apply writes in order) even when the try
  -- that made it ran on a connection lost since.
  local pttl = math.max(redis.call('PTTL', KEYS[1]), ttl)
  redis.call('SET', KEYS[1], format(h), 'PX', pttl)
  return {1, h.t, h.c, pttl, kind}
end
local pttl = redis.call('PTTL', KEYS[1])
if ARGV[5] ~= '' and string.find(ARGV[6], 'w', 1, true) then
  redis.call('ZADD', KEYS[3], 'NX', place(), ARGV[5])
  redis.call('PEXPIRE', KEYS[3], string.format('%.0f', math.max(pttl, 0) + 60000))
  if not h.w then
    h.w = true
    redis.call('SET', KEYS[1], format(h), 'KEEPTTL')
  end
end
return {0, '', 0, pttl}
