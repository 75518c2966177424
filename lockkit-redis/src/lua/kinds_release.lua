local H, Z, Q = KEYS[1], KEYS[2], KEYS[3]
local att = ARGV[3]
local now = now_ms()
purge(H, Z, now)
local x = hold_of(H, Z, ARGV[4], ARGV[1], ARGV[2], now)
if not x then
  settle(H, Z, now)
  return -1
end
local ids = redis.call('HGET', H, 'a|' .. x)
local at = nil
for i = 1, #ids, 16 do
  if string.sub(ids, i, i + 15) == att then at = i end
end
-- A share already taken back (a repeated release) changes nothing.
if not at then return #ids / 16 end
ids = string.sub(ids, 1, at - 1) .. string.sub(ids, at + 16)
redis.call('HDEL', H, 'a:' .. att)
if #ids > 0 then
  redis.call('HSET', H, 'a|' .. x, ids)
  return #ids / 16
end
redis.call('HDEL', H, 'o|' .. x, 't|' .. x, 'a|' .. x, 'g|' .. x)
redis.call('ZREM', Z, x)
settle(H, Z, now)
if redis.call('EXISTS', Q) == 1 then return wake(H, ARGV[5]) end
return 0
