-- Prepended to the scripts that tell waiting clients.
-- The own channel of waiting client `id` on the lock channel `lock`; `at`
-- is where it differs from the lock channel (see `Keys::waiter_mark`).
local function waiter_channel(lock, at, id)
  return string.sub(lock, 1, at) .. 'w' .. id .. string.sub(lock, at + 1)
end
