-- Takes a free lock: what `SET lock owner NX PX ttl GET` does on Redis 7, for older servers.
-- KEYS[1] the lock
-- ARGV[1] owner, ARGV[2] TTL in milliseconds
-- Returns the holder found (the lock is left as it was), or nil when the lock was free and
-- is now the owner's.
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return holder
