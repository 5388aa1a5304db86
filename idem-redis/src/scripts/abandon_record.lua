-- Deletes a running record, only if ARGV[1] began it, so a retry runs afresh.
-- KEYS[1] the record (laid out as complete_record.lua says); ARGV[1] owner. Returns 1 if
-- deleted, else 0.
-- Then wakes the record's waiters (record_prelude.lua).
local record = redis.pcall('GET', KEYS[1])
if type(record) ~= 'string' or string.sub(record, 1, 1) ~= 'r'
    or string.sub(record, 34) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
wake_record_waiters(KEYS[1])
return 1
