-- Takes a lock and draws a fencing token in one step.
-- KEYS[1] the lock, KEYS[2] its fencing counter (same hash tag, so one cluster slot)
-- ARGV[1] owner, ARGV[2] TTL in milliseconds
-- Returns {1, token} acquired; {2, token, pttl} already ours; {0, 0, pttl} held by another.
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, redis.call('INCR', KEYS[2])}
end
local remaining = redis.call('PTTL', KEYS[1])
if holder == ARGV[1] then
  return {2, tonumber(redis.call('GET', KEYS[2]) or '0'), remaining}
end
return {0, 0, remaining}
