local H, Z, Q, F = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
purge(H, Z, now)
local x = redis.call('HGET', H, 'a:' .. ARGV[2])
if not x or redis.call('HGET', H, 'o|' .. x) ~= ARGV[1] then return 0 end
local write = redis.call('HMGET', H, 't|' .. x, 'p|' .. x)
local _, gone = take_share(H, Z, x, ARGV[2])
-- A write hold undone (it never stood on a quorum) was not the last write:
-- readers go on carrying the one before.
if gone and x == 'w' and write[2] and redis.call('HGET', H, 'lw') == write[1] then
  if write[2] == '' then redis.call('HDEL', H, 'lw') else redis.call('HSET', H, 'lw', write[2]) end
end
-- The attempt left the line by taking its share here: back to its place.
if ARGV[5] ~= '' and ARGV[6] ~= '' then
  if redis.call('ZADD', Q, 'NX', ARGV[6], ARGV[5]) == 1 then redis.call('PEXPIRE', Q, 60000) end
  if ARGV[3] == 'w' then
    redis.call('HSET', F, ARGV[5], '1')
    redis.call('PEXPIRE', F, 60000)
  end
end
settle(H, Z, now)
if gone and ARGV[7] ~= 's' and redis.call('EXISTS', Q) == 1 then wake(H, ARGV[4]) end
return 1
