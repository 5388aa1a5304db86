-- Counts the caller as waiting for the record to end, if it is in progress, in the same
-- step that sees it so: an ending after this step sees the waiter and leaves it a wake-up
-- (complete_record.lua, abandon_record.lua, remove_record.lua), and one before it left the
-- record ended for this step. The record's first byte becomes `w` (waited for), its lease
-- kept: the scripts that end a record wake waiters only for such a one, so that a record
-- nobody waits for costs them no call more.
-- KEYS[1] the record, KEYS[2] its waiter count (one hash tag, so one cluster slot)
-- ARGV[1] how long the registration must last at least, in milliseconds
-- Returns the lease's time left in milliseconds (-1 for none) when registered; -2 when
-- the record is not in progress (none, or done); -3 for a record in the hash layout of
-- earlier versions, whose ending signals nobody.
local record = redis.pcall('GET', KEYS[1])
if type(record) == 'table' and record.err then
  return -3
end
local state = type(record) == 'string' and string.sub(record, 1, 1)
if state ~= 'r' and state ~= 'w' then
  return -2
end
if state == 'r' then
  redis.call('SETRANGE', KEYS[1], 0, 'w')
end
redis.call('INCR', KEYS[2])
-- Never shortens what another waiter's registration needs.
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
return redis.call('PTTL', KEYS[1])
