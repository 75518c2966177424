local h = parse(KEYS[1], redis.call('GET', KEYS[1]))
if not h then return {} end
return {h.o, h.c, h.t, redis.call('PTTL', KEYS[1])}
