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
local q = redis.call('ZRANGE', KEYS[2], 0, 1)
local m = ARGV[2] .. '|' .. (q[1] or '')
if q[1] then
  local at = tonumber(ARGV[7])
  local before, after = string.sub(ARGV[3], 1, at), string.sub(ARGV[3], at + 1)
  for _, id in ipairs(q) do
    redis.pcall(ARGV[4], before .. 'w' .. id .. after, m)
  end
else
  redis.pcall(ARGV[4], ARGV[3], m)
end
return m
