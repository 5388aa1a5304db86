-- Deletes the lock only if ARGV[1] owns it: a holder whose lease ran out cannot free the
-- lock that someone else has taken since.
-- KEYS[1] the lock; ARGV[1] owner. Returns 1 if deleted, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
