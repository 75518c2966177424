local H, Z, kind = KEYS[1], KEYS[2], ARGV[1]
local now = now_ms()
local live = redis.call('ZRANGEBYSCORE', Z, '(' .. fmt(now), '+inf', 'WITHSCORES')
local found = {}
for i = 1, #live, 2 do
  local x = live[i]
  local first = string.sub(x, 1, 1)
  if kind == 'p' or (kind == 'w' and x == 'w') or (kind == 'r' and first == 'r') then
    local h = redis.call('HMGET', H, 'o|' .. x, 't|' .. x, 'a|' .. x, 'g|' .. x, 'k|' .. x)
    if h[1] then
      found[#found + 1] = {tonumber(h[4]), h[1], #h[3] / 16, h[2], tonumber(live[i + 1]) - now, tonumber(h[5] or '-1'),
        kind == 'p' and tonumber(redis.call('HGET', H, 'n') or '0') or -1}
    end
  end
end
table.sort(found, function(a, b) return a[1] < b[1] end)
local out = {}
for _, f in ipairs(found) do
  out[#out + 1] = {f[2], f[3], f[4], f[5], f[6], f[7]}
end
return out
