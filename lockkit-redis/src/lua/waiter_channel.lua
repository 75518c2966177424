-- Prepended to the scripts that tell waiting clients.
-- The own channel of waiting client `id` on the lock channel `lock`; `at`
-- is where it differs from the lock channel (see `Keys::waiter_mark`).
local function waiter_channel(lock, at, id)
  return string.sub(lock, 1, at) .. 'w' .. id .. string.sub(lock, at + 1)
end
-- Tells waiting client `id` `m` on its own channel of `lock` (with `cmd`,
-- `PUBLISH`/`SPUBLISH`). A client nobody listens for there is gone — its
-- process died and the server closed its connection — and leaves `queue`
-- at once: false. (A user without channel rights gets an error, not 0:
-- its clients stay.)
local function tell_or_drop(cmd, lock, at, queue, id, m)
  if redis.pcall(cmd, waiter_channel(lock, at, id), m) == 0 then
    redis.call('ZREM', queue, id)
    return false
  end
  return true
end
