-- Takes a lock and draws a fencing token in one step.
-- KEYS[1] the lock, KEYS[2] its fencing counter (same hash tag, so one cluster slot)
-- ARGV[1] owner, ARGV[2] TTL in milliseconds
-- Returns the token, an integer, when acquired; {2, token, pttl} already ours;
-- {0, 0, pttl} held by another.
-- A free lock, the common case, costs two calls and a bare integer (Redis spends more on a
-- table reply than on a call).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
-- Held: no key expires while a script runs, so the holder is still there.
local remaining = redis.call('PTTL', KEYS[1])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {2, tonumber(redis.call('GET', KEYS[2]) or '0'), remaining}
end
return {0, 0, remaining}
