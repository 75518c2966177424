local out = {}
for i = 1, #KEYS do
  local h = redis.call('HMGET', KEYS[i], 'o', 't')
  if h[1] == ARGV[3 * i - 2] and h[2] == ARGV[3 * i - 1] then
    local ttl = tonumber(ARGV[3 * i])
    local pttl = redis.call('PTTL', KEYS[i])
    if pttl < ttl then
      redis.call('PEXPIRE', KEYS[i], ARGV[3 * i])
      pttl = ttl
    end
    out[i] = pttl
  else
    out[i] = -3
  end
end
return out
