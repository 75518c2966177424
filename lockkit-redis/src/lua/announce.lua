-- Prepended (after `waiter_channel.lua`) to the scripts that free a name.
-- Announces a freed name: `PREFIX|HEAD` with `cmd` (`PUBLISH`/`SPUBLISH`)
-- to the head of `queue` and the next in line (never to `except`), or
-- `PREFIX|` on `lock` to everybody when nobody queued. A head or next
-- that nobody listens for is dropped from the queue (see `tell_or_drop`)
-- and the one after it told instead. The head told (not `except`) and
-- when (server ms) go to `turn`, so that it is dropped as one that let
-- its turn pass only once it had the fallback delay here (see
-- `had_turn`). Returns the message, and whether a client in line was
-- told (else the line is empty).
local function announce(cmd, lock, at, queue, except, prefix, turn)
  for _ = 1, 100 do
    local q = redis.call('ZRANGE', queue, 0, 1)
    if not q[1] then break end
    local m = prefix .. '|' .. q[1]
    local live = true
    for _, id in ipairs(q) do
      if id ~= except and not tell_or_drop(cmd, lock, at, queue, id, m) then
        live = false
        break
      end
    end
    if live then
      if q[1] ~= except then
        -- (Kept well past any fallback delay; taking the name ends it.)
        redis.call('SET', turn, q[1] .. '|' .. string.format('%.0f', now_ms()), 'PX', 10000)
      end
      return m, true
    end
  end
  local m = prefix .. '|'
  redis.pcall(cmd, lock, m)
  return m, false
end
-- Whether waiting client `head` has had its turn for `grace` ms by `turn`
-- (see `announce`): true also when no turn of it is recorded (none was
-- announced here, or the record is gone).
local function had_turn(turn, head, grace)
  local r = redis.call('GET', turn)
  if not r then return true end
  local at = string.find(r, '|', 1, true)
  if not at or string.sub(r, 1, at - 1) ~= head then return true end
  return now_ms() - tonumber(string.sub(r, at + 1)) >= grace
end
