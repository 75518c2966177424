-- A grant that stands on a quorum moved the caller's entry (ARGV[9]:
-- `x` out, `kPLACE` to the back): the same here.
if ARGV[9] ~= '' and ARGV[5] ~= '' then
  if ARGV[9] == 'x' then
    redis.call('ZREM', KEYS[2], ARGV[5])
  else
    redis.call('ZADD', KEYS[2], 'XX', string.sub(ARGV[9], 2), ARGV[5])
  end
end
local h = parse(KEYS[1], redis.call('GET', KEYS[1]))
if not h or h.o ~= ARGV[1] then return 0 end
local was_at = share_of(h, ARGV[2])
if not was_at then return 0 end
drop_share(h, ARGV[2])
if h.c > 0 then
  redis.call('SET', KEYS[1], format(h), 'KEEPTTL')
  return 1
end
-- The attempt left the line (or went to its back) by taking the name
-- here: back to where its entry stood, or, not known, to its place.
if ARGV[5] ~= '' and ARGV[6] ~= '' then
  if was_at ~= '1' then
    redis.call('ZADD', KEYS[2], was_at, ARGV[5])
  elseif redis.call('ZADD', KEYS[2], 'NX', ARGV[6], ARGV[5]) == 1 then
    redis.call('PEXPIRE', KEYS[2], 60000)
  end
end
if ARGV[8] ~= 's' then
  announce(ARGV[4], ARGV[3], tonumber(ARGV[7]), KEYS[2], ARGV[5], 'u' .. ARGV[2], KEYS[3])
end
free_name(KEYS[1], KEYS[2])
return 1
