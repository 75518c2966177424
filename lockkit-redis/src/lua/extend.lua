local out = {}
for i = 1, #KEYS do
  local h = parse(KEYS[i], redis.call('GET', KEYS[i]))
  if h and h.o == ARGV[3 * i - 2] and h.t == ARGV[3 * i - 1] then
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
