-- The restart guard's marker (see guard.lua): KEYS[1]. With ARGV[1] (ms),
-- a server without a marker gets one, quarantined for that long from now;
-- with ARGV[1] = '' it is only read. With ARGV[2] (ms), the lease bound is
-- raised for a lease that long (an extension). With ARGV[3] (ms), the
-- server's clock was seen stepped forward that far: its leases ended that
-- much early, so it is quarantined until they would have ended (the lease
-- bound, read on the stepped clock, plus the step).
-- Returns {1, quarantine left, lease bound left} (ms, never negative), or
-- {0} without a marker.
local now = now_ms()
if ARGV[1] ~= '' and redis.call('EXISTS', KEYS[1]) == 0 then
  local q = string.format('%.0f', now + tonumber(ARGV[1]))
  redis.call('HSET', KEYS[1], 'q', q, 'e', q)
end
local m = redis.call('HMGET', KEYS[1], 'q', 'e')
if not m[1] then return {0} end
if ARGV[2] and ARGV[2] ~= '' then
  raise_bound(KEYS[1], now, tonumber(ARGV[2]), m[2])
  m = redis.call('HMGET', KEYS[1], 'q', 'e')
end
if ARGV[3] and ARGV[3] ~= '' then
  local q = math.max(tonumber(m[1]) or 0, (tonumber(m[2]) or 0) + tonumber(ARGV[3]))
  redis.call('HSET', KEYS[1], 'q', string.format('%.0f', q))
  m[1] = q
end
local left = function(v) return math.max((tonumber(v) or 0) - now, 0) end
return {1, left(m[1]), left(m[2])}
