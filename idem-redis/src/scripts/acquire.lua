-- Takes a free key: what `SET key value NX PX ttl GET` does on Redis 7, for older servers.
-- KEYS[1] a lock, or an idempotency record
-- ARGV[1] the value (the lock's owner, or the record begun), ARGV[2] TTL in milliseconds
-- Returns the value found (the key is left as it was), or nil when the key was free and
-- now holds ARGV[1].
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return holder
