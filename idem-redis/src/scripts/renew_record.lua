-- Extends the lease of a running record, only if ARGV[1] began it.
-- KEYS[1] the record (laid out as complete_record.lua says); ARGV[1] owner, ARGV[2] lease in
-- milliseconds. Returns 1 if extended, else 0.
-- A running record is `r…`, or `w…` once a waiter waits for it (wait_for_record.lua).
local record = redis.pcall('GET', KEYS[1])
local state = type(record) == 'string' and string.sub(record, 1, 1)
if (state ~= 'r' and state ~= 'w') or string.sub(record, 34) ~= ARGV[1] then
  return 0
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
