-- Deletes the lock only if ARGV[1] owns it, and then wakes whoever waits: the head of
-- the fair queue, if it has one, and one waiter that registered, if any.
-- KEYS[1] the lock, KEYS[2] its waiter count, KEYS[3] its signal list, KEYS[4] its fair
-- queue, KEYS[5] the fair places' lapse times (one hash tag, so one cluster slot)
-- ARGV[1] owner, ARGV[2] how long an untaken signal is kept, in milliseconds, ARGV[3] the
-- prefix of every fair waiter's wake-up list
-- Returns 1 if deleted, else 0.
--
-- A release nobody waits for is the compare-and-delete and two reads. Each registration
-- is answered by one element, and one element wakes one `BLPOP`: a release never
-- stampedes the waiters, and two releases in a row wake two registered waiters.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local waiting = tonumber(redis.call('GET', KEYS[2]) or '0')
if waiting > 0 then
  if waiting == 1 then
    redis.call('DEL', KEYS[2])
  else
    redis.call('DECR', KEYS[2])
  end
  redis.call('RPUSH', KEYS[3], 1)
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  hand_turn(KEYS[4], KEYS[5], now_ms(), ARGV[3], ARGV[2])
end
return 1
