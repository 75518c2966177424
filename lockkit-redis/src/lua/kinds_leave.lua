local H, Z, Q, T = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
purge(H, Z, now)
-- The client's entries (its last waiter here gave up), or the one entry
-- asked for if it was told its turn and nobody came since.
local entries = {ARGV[1], member(ARGV[1], 'w')}
if ARGV[6] ~= '' then
  if not tonumber(redis.call('HGET', T, ARGV[6]) or '') then return 0 end
  entries = {ARGV[6]}
end
local was = 0
for _, m in ipairs(entries) do
  was = was + redis.call('ZREM', Q, m)
  redis.call('HDEL', T, m)
end
-- It may have stood in the way of others, or been let in itself.
if was > 0 then admit(H, Z, Q, T, ARGV[2], permits_of(H), ARGV[3], tonumber(ARGV[4]), ARGV[5], true) end
return was
