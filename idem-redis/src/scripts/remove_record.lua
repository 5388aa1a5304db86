-- Deletes a record, in either layout, whoever began it, and wakes its waiters.
-- KEYS[1] the record. Returns 1 if a record was there, else 0.
-- Then wakes the record's waiters (record_prelude.lua).
local removed = redis.call('DEL', KEYS[1])
wake_record_waiters(KEYS[1])
return removed
