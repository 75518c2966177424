-- Prepended to the scripts that read or write a mutex's hold (see
-- `layout`, key layout 2): one string `2|TOKEN|COUNT|W|SHARES|OWNER`, with
-- the lease as the key's expiry. `W` is `w` once a client queued for the
-- hold, else empty; `SHARES` holds one `ID:AT,` per share of the count —
-- the attempt id (16 hex digits) and where that attempt's line entry stood
-- before the grant moved it (`1`: none; for an undo). `2|q` (`FREE`) is a
-- free name whose line waits: a release leaves it, instead of deleting the
-- key, while clients queue, so that a plain `SET NX` takes only a name
-- nobody holds or waits for. Any other value is another lockkit version's
-- layout, and so is a key of another type (the server's `WRONGTYPE`): both
-- refuse, so that two layouts never both grant a name.
local FREE = '2|q'

-- The hold that value `v` of `key` (a GET's reply) stores, or nil (no key,
-- or `FREE`): {t = token, c = count, w = marked, s = shares, o = owner}.
local function parse(key, v)
  if not v then return nil end
  if string.sub(v, 1, 2) ~= '2|' then
    error({err = 'LOCKKIT_LAYOUT ' .. key .. ' holds a value of another lockkit key layout'})
  end
  if v == FREE then return nil end
  local f, at = {}, 3
  for i = 1, 4 do
    local bar = string.find(v, '|', at, true)
    f[i] = string.sub(v, at, bar - 1)
    at = bar + 1
  end
  return {t = f[1], c = tonumber(f[2]), w = f[3] ~= '', s = f[4], o = string.sub(v, at)}
end

-- A hold as its key's value.
local function format(h)
  return '2|' .. h.t .. '|' .. string.format('%d', h.c) .. '|' .. (h.w and 'w' or '') .. '|' .. h.s .. '|' .. h.o
end

-- Where attempt `id`'s share in `h` recorded its line entry, or nil when
-- `h` has no share of `id`.
local function share_of(h, id)
  local at = string.find(h.s, id .. ':', 1, true)
  if not at then return nil end
  return string.sub(h.s, at + 17, string.find(h.s, ',', at, true) - 1)
end

-- Takes attempt `id`'s share (present) out of `h`.
local function drop_share(h, id)
  local at = string.find(h.s, id .. ':', 1, true)
  h.s = string.sub(h.s, 1, at - 1) .. string.sub(h.s, string.find(h.s, ',', at, true) + 1)
  h.c = h.c - 1
end

-- Frees `lock`: `FREE` while line `queue` has clients (until the line's
-- own expiry), else no key at all.
local function free_name(lock, queue)
  local keep = redis.call('PTTL', queue)
  if keep == -2 then
    redis.call('DEL', lock)
  else
    redis.call('SET', lock, FREE, 'PX', keep > 0 and keep or 60000)
  end
end
