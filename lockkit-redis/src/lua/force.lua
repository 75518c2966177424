local h = redis.call('HMGET', KEYS[1], 'o', 'c', 't')
if not h[1] then return {} end
local pttl = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[2], ARGV[1], h[3])
return {h[1], h[2], h[3], pttl}
