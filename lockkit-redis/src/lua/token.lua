-- Prepended to the scripts that issue fencing tokens.
-- The next token of `counter` (the name's bucket counter): the server's
-- clock in µs, or `proposal` (Redlock; '' for none) when it is ahead of the
-- clock by less than a minute, or the counter + 1 when that is more. The
-- counter follows the clock: one GETSET takes the token when the clock is
-- ahead of the counter, as it is but for a clock step back. Returns the
-- token as a string, and the server's TIME.
local function next_token(counter, proposal)
  local now = redis.call('TIME')
  local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if proposal ~= '' then
    local p = tonumber(proposal)
    if p > floor and p < floor + 60000000 then floor = p end
  end
  local fs = string.format('%.0f', floor)
  local t = tonumber(redis.call('GETSET', counter, fs) or '0') + 1
  if t <= floor then
    t = floor
  else
    redis.call('SET', counter, string.format('%.0f', t))
  end
  return string.format('%.0f', t), now
end
