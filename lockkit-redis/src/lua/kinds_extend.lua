local now = now_ms()
local out = {}
for i = 1, #KEYS / 2 do
  local H, Z = KEYS[2 * i - 1], KEYS[2 * i]
  local a = 4 * i - 4
  local x, ends = hold_of(H, Z, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], now)
  if x then
    ends = math.max(ends, now + tonumber(ARGV[a + 4]))
    redis.call('ZADD', Z, 'XX', fmt(ends), x)
    local left = fmt(ends - now)
    redis.call('PEXPIRE', Z, left, 'GT')
    redis.call('PEXPIRE', H, fmt(ends - now + 60000), 'GT')
    out[i] = ends - now
  else
    out[i] = -3
  end
end
return out
