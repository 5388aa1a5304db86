-- Deletes a running record, only if ARGV[1] began it, so a retry runs afresh.
-- KEYS[1] the record (laid out as complete_record.lua says); ARGV[1] owner. Returns 1 if
-- deleted, else 0.
-- Then wakes the record's waiters (record_prelude.lua), if it is marked as waited for
-- (`w…`, wait_for_record.lua).
local record = redis.pcall('GET', KEYS[1])
local state = type(record) == 'string' and string.sub(record, 1, 1)
if (state ~= 'r' and state ~= 'w') or string.sub(record, 34) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if state == 'w' then
  wake_record_waiters(KEYS[1])
end
return 1
