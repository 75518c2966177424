-- A grant that stands on a quorum moved the caller's entry (ARGV[9]:
-- `x` out, `kPLACE` to the back): the same here.
if ARGV[9] ~= '' and ARGV[5] ~= '' then
  if ARGV[9] == 'x' then
    redis.call('ZREM', KEYS[2], ARGV[5])
  else
    redis.call('ZADD', KEYS[2], 'XX', string.sub(ARGV[9], 2), ARGV[5])
  end
end
local h = redis.call('HMGET', KEYS[1], 'o', 'c', 'a:' .. ARGV[2])
if h[1] ~= ARGV[1] or not h[3] then return 0 end
redis.call('HDEL', KEYS[1], 'a:' .. ARGV[2])
local c = tonumber(h[2]) - 1
if c > 0 then
  redis.call('HSET', KEYS[1], 'c', c)
  return 1
end
redis.call('DEL', KEYS[1])
-- The attempt left the line (or went to its back) by taking the name
-- here: back to where its entry stood, or, not known, to its place.
if ARGV[5] ~= '' and ARGV[6] ~= '' then
  if h[3] ~= '1' then
    redis.call('ZADD', KEYS[2], h[3], ARGV[5])
  elseif redis.call('ZADD', KEYS[2], 'NX', ARGV[6], ARGV[5]) == 1 then
    redis.call('PEXPIRE', KEYS[2], 60000)
  end
end
if ARGV[8] == 's' then return 1 end
announce(ARGV[4], ARGV[3], tonumber(ARGV[7]), KEYS[2], ARGV[5], 'u' .. ARGV[2], KEYS[3])
return 1
