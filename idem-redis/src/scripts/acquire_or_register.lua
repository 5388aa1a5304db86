-- Takes a free lock, drawing a fencing token if asked; or, when another owner holds it,
-- counts the caller as waiting, in the same step: a release after this step sees the
-- waiter and leaves it a wake-up, and a release before it left the lock free for this step.
-- KEYS[1] the lock, KEYS[2] its fencing counter, KEYS[3] its waiter count (one hash tag,
-- so one cluster slot)
-- ARGV[1] owner, ARGV[2] TTL in milliseconds, ARGV[3] '1' to draw a fencing token,
-- ARGV[4] how long the registration must last at least, in milliseconds
-- Returns the token, an integer, when acquired; {2, token, pttl} already ours;
-- {0, 0, pttl} held by another. Without fencing, token is 0.
local fenced = ARGV[3] == '1'
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if fenced then
    return redis.call('INCR', KEYS[2])
  end
  return 0
end
local remaining = redis.call('PTTL', KEYS[1])
if holder == ARGV[1] then
  if fenced then
    return {2, tonumber(redis.call('GET', KEYS[2]) or '0'), remaining}
  end
  return {2, 0, remaining}
end
redis.call('INCR', KEYS[3])
-- Never shortens what another waiter's registration needs.
if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
end
return {0, 0, remaining}
