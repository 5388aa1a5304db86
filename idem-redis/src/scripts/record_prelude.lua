-- What the scripts that end a record (complete_record.lua, abandon_record.lua,
-- remove_record.lua) share: waking the record's waiters.

-- Wakes the waiters of the record `record` (`namespace:{key}:record`) that
-- wait_for_record.lua counted under the record's prefix (`namespace:{key}:`, the same hash
-- tag): one element of its wake-up list per waiter, so that each `BLPOP` takes one, kept
-- 5 s (`SIGNAL_KEPT_MS`) for a waiter whose `BLPOP` has not reached the server yet.
-- complete_record.lua and abandon_record.lua call it only for a record marked as waited
-- for (`w…`); remove_record.lua, an operator's, always.
local function wake_record_waiters(record)
  local prefix = string.sub(record, 1, -7)
  local waiters = prefix .. 'record_waiters'
  local waiting = tonumber(redis.call('GET', waiters) or '0')
  if waiting > 0 then
    redis.call('DEL', waiters)
    local signal = prefix .. 'record_signal'
    for _ = 1, waiting do
      redis.call('RPUSH', signal, 1)
    end
    redis.call('PEXPIRE', signal, 5000)
  end
end
