local H, Z, Q, T = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_ms()
purge(H, Z, now)
local x = hold_of(H, Z, ARGV[4], ARGV[1], ARGV[2], now)
if not x then
  settle(H, Z, now)
  return -1
end
-- A share already taken back (a repeated release) changes nothing.
local left, gone = take_share(H, Z, x, ARGV[3])
if not gone then return left end
settle(H, Z, now)
local told = admit(H, Z, Q, T, ARGV[4], permits_of(H), ARGV[5], tonumber(ARGV[6]), ARGV[7], true)
return told or 0
