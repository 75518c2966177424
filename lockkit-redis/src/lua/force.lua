local h = parse(KEYS[1], redis.call('GET', KEYS[1]))
if not h then return {} end
local pttl = redis.call('PTTL', KEYS[1])
free_name(KEYS[1], KEYS[2])
redis.pcall(ARGV[2], ARGV[1], h.t)
return {h.o, h.c, h.t, pttl}
