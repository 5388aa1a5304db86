-- Deletes the lock only if ARGV[1] owns it, and then leaves one wake-up for a waiter.
-- KEYS[1] the lock, KEYS[2] its signal list (same hash tag, so one cluster slot)
-- ARGV[1] owner, ARGV[2] how long an untaken signal is kept, in milliseconds
-- Returns 1 if deleted, else 0.
--
-- One element wakes one `BLPOP`, so a release never stampedes the waiters. The list is
-- cut to one element: releases nobody waited for do not pile up wake-ups for later.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('LPUSH', KEYS[2], 1)
redis.call('LTRIM', KEYS[2], 0, 0)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
