local h = redis.call('HMGET', KEYS[1], 'o', 't', 'c', 'w', 'a:' .. ARGV[6])
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return -1 end
if not h[5] then return tonumber(h[3]) end
local c = tonumber(h[3]) - 1
if c > 0 then
  redis.call('HDEL', KEYS[1], 'a:' .. ARGV[6])
  redis.call('HSET', KEYS[1], 'c', c)
  return c
end
redis.call('DEL', KEYS[1])
if not h[4] and ARGV[5] == 'q' then return 0 end
return announce(ARGV[4], ARGV[3], tonumber(ARGV[7]), KEYS[2], '', ARGV[2], KEYS[3])
