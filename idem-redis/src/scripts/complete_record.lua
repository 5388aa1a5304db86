-- Stores the response of a record, only if it is still running and ARGV[1] began it: a
-- worker whose lease ran out cannot overwrite the attempt that replaced it.
-- KEYS[1] the record, a string: 'r', the fingerprint (32 bytes) and the owner while it
-- runs; 'd', the fingerprint and the response once done
-- ARGV[1] owner, ARGV[2] response, ARGV[3] retention in milliseconds
-- Returns 1 if stored, else 0. `pcall`, because a key of another type (the hash that
-- earlier versions wrote) is nobody's here, not an error.
-- Then wakes the record's waiters (record_prelude.lua), if it is marked as waited for:
-- `w…` rather than `r…` (wait_for_record.lua); one nobody waits for costs nothing more.
local record = redis.pcall('GET', KEYS[1])
local state = type(record) == 'string' and string.sub(record, 1, 1)
if (state ~= 'r' and state ~= 'w') or string.sub(record, 34) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], 'd' .. string.sub(record, 2, 33) .. ARGV[2], 'PX', ARGV[3])
if state == 'w' then
  wake_record_waiters(KEYS[1])
end
return 1
