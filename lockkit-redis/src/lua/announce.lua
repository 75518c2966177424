-- Prepended (after `waiter_channel.lua`) to the scripts that free a name.
-- Announces a freed name: `PREFIX|HEAD` with `cmd` (`PUBLISH`/`SPUBLISH`)
-- to the head of `queue` and the next in line (never to `except`), or
-- `PREFIX|` on `lock` to everybody when nobody queued. Returns the message.
local function announce(cmd, lock, at, queue, except, prefix)
  local q = redis.call('ZRANGE', queue, 0, 1)
  local m = prefix .. '|' .. (q[1] or '')
  if q[1] then
    for _, id in ipairs(q) do
      if id ~= except then redis.pcall(cmd, waiter_channel(lock, at, id), m) end
    end
  else
    redis.pcall(cmd, lock, m)
  end
  return m
end
