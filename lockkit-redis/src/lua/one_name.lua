-- Prepended to the acquisition scripts. A name is one lock whatever the
-- kind: a new hold of one kind waits while holds of another kind stand.
-- Their releases tell only their own kind's line, so a caller refused for
-- them looks again after at most ONE_NAME_RECHECK ms.
local ONE_NAME_RECHECK = 200

-- How long (ms) the other kinds' holds on the name run on from `now` (0:
-- none stands): `mutex`, the mutex's lock key (`''`: not asked), and `zs`,
-- the sorted sets of lease ends of a semaphore's or read-write lock's holds.
local function other_kind_left(mutex, zs, now)
  local left = 0
  if mutex ~= '' then
    local v = redis.call('GET', mutex)
    if v and v ~= '2|q' then left = math.max(redis.call('PTTL', mutex), 1) end
  end
  for _, z in ipairs(zs) do
    local last = redis.call('ZREVRANGEBYSCORE', z, '+inf', '(' .. string.format('%.0f', now), 'WITHSCORES', 'LIMIT', 0, 1)
    if last[2] then left = math.max(left, tonumber(last[2]) - now) end
  end
  return left
end
