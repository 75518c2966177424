-- Prepended (after `waiter_channel.lua`) to the scripts that free a name.
-- Announces a freed name: `PREFIX|HEAD` with `cmd` (`PUBLISH`/`SPUBLISH`)
-- to the head of `queue` and the next in line (never to `except`), or
-- `PREFIX|` on `lock` to everybody when nobody queued. A head or next
-- that nobody listens for is dropped from the queue (see `tell_or_drop`)
-- and the one after it told instead. Returns the message.
local function announce(cmd, lock, at, queue, except, prefix)
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
    if live then return m end
  end
  local m = prefix .. '|'
  redis.pcall(cmd, lock, m)
  return m
end
