-- A fair lock's attempt, in one step: drops lapsed places at the head of the queue; takes
-- the lock if it is free and the queue is empty or the caller at its head; else queues
-- the caller (or renews its place).
-- KEYS[1] the lock, KEYS[2] its fencing counter, KEYS[3] its queue, KEYS[4] the places'
-- lapse times, KEYS[5] the caller's wake-ups (one hash tag, so one cluster slot)
-- ARGV[1] owner, ARGV[2] TTL in milliseconds, ARGV[3] '1' to draw a fencing token,
-- ARGV[4] how long the caller's place lasts, in milliseconds ('0': take no place),
-- ARGV[5] the prefix of every waiter's wake-up list, ARGV[6] how long a wake-up is kept
-- Returns {1, token} acquired; {2, token, pttl} already ours;
-- {0, 0, pttl or -2 when free, 1 when the caller is at the head else 0} queued.
-- Without fencing, token is 0.
local owner, fenced = ARGV[1], ARGV[3] == '1'
local holder = redis.call('GET', KEYS[1])
if holder == owner then
  local remaining = redis.call('PTTL', KEYS[1])
  if fenced then
    return {2, tonumber(redis.call('GET', KEYS[2]) or '0'), remaining}
  end
  return {2, 0, remaining}
end
local now = now_ms()
local first = head(KEYS[3], KEYS[4], now)
if not holder and (not first or first == owner) then
  redis.call('SET', KEYS[1], owner, 'PX', ARGV[2])
  if first then
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], owner)
  end
  redis.call('DEL', KEYS[5])
  if fenced then
    return {1, redis.call('INCR', KEYS[2])}
  end
  return {1, 0}
end
local remaining = -2
if holder then
  remaining = redis.call('PTTL', KEYS[1])
else
  -- Free, and another waiter's turn: make sure it knows (its place may just have come
  -- to the head when a lapsed one before it was dropped).
  hand_turn(KEYS[3], KEYS[4], now, ARGV[5], ARGV[6])
end
local place = tonumber(ARGV[4])
if place > 0 then
  if redis.call('HSET', KEYS[4], owner, now + place) == 1 then
    redis.call('RPUSH', KEYS[3], owner)
  end
  -- The queue lasts as long as its longest place.
  for i = 3, 4 do
    if redis.call('PTTL', KEYS[i]) < place then
      redis.call('PEXPIRE', KEYS[i], place)
    end
  end
  first = first or owner
end
local next = 0
if first == owner then
  next = 1
end
return {0, 0, remaining, next}
