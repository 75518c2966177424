-- Prepended (after `clock.lua`) to the scripts that grant or extend leases
-- when the restart guard is on. The marker hash (`P` + `node`) lives as long as the server's
-- data: a server without it lost its keys (restarted without persistence,
-- flushed, evicted) and with them holds whose holders still count on them.
-- Fields: `q`, the end of the quarantine set when the marker was written
-- (server ms); `e`, a bound of every lease end this server granted.

-- Raises the marker's lease bound for a lease of `ttl` ms from `now`: by
-- half a lease more than needed, so that most grants write nothing.
local function raise_bound(marker, now, ttl, e)
  if now + ttl > (tonumber(e) or 0) then
    redis.call('HSET', marker, 'e', string.format('%.0f', now + ttl + math.floor(ttl / 2)))
  end
end

-- nil when the server may grant a lease of `ttl` ms; else the refusal:
-- `{-3, -1}` without a marker (the client sets the quarantine), `{-3, ms}`
-- while quarantined, with the time left.
local function guard(marker, ttl)
  local m = redis.call('HMGET', marker, 'q', 'e')
  if not m[1] then return {-3, -1} end
  local now = now_ms()
  local q = tonumber(m[1])
  if now < q then return {-3, q - now} end
  raise_bound(marker, now, ttl, m[2])
  return nil
end
