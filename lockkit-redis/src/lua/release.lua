local h = parse(KEYS[1], redis.call('GET', KEYS[1]))
if not h or h.o ~= ARGV[1] or h.t ~= ARGV[2] then return -1 end
if not share_of(h, ARGV[6]) then return h.c end
drop_share(h, ARGV[6])
if h.c > 0 then
  redis.call('SET', KEYS[1], format(h), 'KEEPTTL')
  return h.c
end
if not h.w and ARGV[5] == 'q' then
  redis.call('DEL', KEYS[1])
  return 0
end
local m, queued = announce(ARGV[4], ARGV[3], tonumber(ARGV[7]), KEYS[2], '', ARGV[2], KEYS[3])
if queued then
  free_name(KEYS[1], KEYS[2])
else
  redis.call('DEL', KEYS[1])
end
return m
