local h = redis.call('HMGET', KEYS[1], 'o', 'c')
if h[1] ~= ARGV[1] then return 0 end
if redis.call('HDEL', KEYS[1], 'a:' .. ARGV[2]) == 0 then return 0 end
local c = tonumber(h[2]) - 1
if c > 0 then
  redis.call('HSET', KEYS[1], 'c', c)
  return 1
end
redis.call('DEL', KEYS[1])
if ARGV[5] ~= '' and ARGV[6] ~= '' then
  if redis.call('ZADD', KEYS[2], 'NX', ARGV[6], ARGV[5]) == 1 then
    redis.call('PEXPIRE', KEYS[2], 60000)
  end
end
if ARGV[8] == 's' then return 1 end
announce(ARGV[4], ARGV[3], tonumber(ARGV[7]), KEYS[2], ARGV[5], 'u' .. ARGV[2])
return 1
