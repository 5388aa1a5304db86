-- Extends the lock only if ARGV[1] owns it.
-- KEYS[1] the lock; ARGV[1] owner, ARGV[2] TTL in milliseconds. Returns 1 if extended, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
