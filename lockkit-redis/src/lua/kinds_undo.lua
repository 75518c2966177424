local H, Z, Q, T = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
purge(H, Z, now)
-- A grant that stands on a quorum moved the caller's entry: the same here.
local move = ARGV[10] or ''
if move ~= '' and ARGV[5] ~= '' then
  local m = member(ARGV[5], ARGV[3])
  redis.call('HDEL', T, m)
  if move == 'x' then
    redis.call('ZREM', Q, m)
  else
    redis.call('ZADD', Q, 'XX', string.sub(move, 2), m)
  end
end
local x = redis.call('HGET', H, 'a:' .. ARGV[2])
if not x or redis.call('HGET', H, 'o|' .. x) ~= ARGV[1] then return 0 end
local write = redis.call('HMGET', H, 't|' .. x, 'p|' .. x)
local was_at = redis.call('HGET', H, 'q:' .. ARGV[2])
local _, gone = take_share(H, Z, x, ARGV[2])
-- A write hold undone (it never stood on a quorum) was not the last write:
-- readers go on carrying the one before.
if gone and x == 'w' and write[2] and redis.call('HGET', H, 'lw') == write[1] then
  if write[2] == '' then redis.call('HDEL', H, 'lw') else redis.call('HSET', H, 'lw', write[2]) end
end
-- The attempt left the line (or went to its back) by taking its share
-- here: back to the place it took the entry from, or, not known, its own.
if ARGV[5] ~= '' and ARGV[6] ~= '' then
  local m = member(ARGV[5], ARGV[3])
  if was_at then
    redis.call('ZADD', Q, was_at, m)
  elseif redis.call('ZADD', Q, 'NX', ARGV[6], m) == 1 then
    redis.call('PEXPIRE', Q, 60000)
  end
end
settle(H, Z, now)
if gone and ARGV[7] ~= 's' then
  admit(H, Z, Q, T, ARGV[3], permits_of(H), ARGV[4], tonumber(ARGV[8]), ARGV[9], true)
end
return 1
