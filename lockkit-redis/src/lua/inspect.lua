local h = redis.call('HMGET', KEYS[1], 'o', 'c', 't')
if not h[1] then return {} end
return {h[1], h[2], h[3], redis.call('PTTL', KEYS[1])}
