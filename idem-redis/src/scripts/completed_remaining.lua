-- The time left of a completed record the caller has just read, for the process's copy of
-- it. Read with the value, in one step: if the record ended and the key was begun again
-- since, a bare PTTL would give the new record's time, and the copy could outlive the
-- record it copies.
-- KEYS[1] the record; ARGV[1] the value the caller read
-- Returns the milliseconds left (as PTTL), or -2 when the key no longer holds that value.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return -2
end
return redis.call('PTTL', KEYS[1])
