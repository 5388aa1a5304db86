-- Deletes the lock only if ARGV[1] owns it, and then wakes whoever waits: the head of
-- the fair queue, if it has one, and one waiter that registered, if any.
-- KEYS[1] the lock
-- ARGV[1] owner, ARGV[2] how long an untaken wake-up is kept, in milliseconds, ARGV[3]
-- the prefix of the lock's keys (`namespace:{key}:`), to which the lock's waiter count
-- (`waiters`), its wake-up list (`signal`), its fair queue (`queue`, `places`) and each
-- fair waiter's wake-ups (`turn:<owner>`) add their suffix. They share the lock's hash
-- tag, so one cluster slot; naming them here rather than passing them spares a release
-- nobody waits for the client's work of spelling five key names.
-- Returns 1 if deleted, else 0.
--
-- A release nobody waits for is the compare-and-delete and one read (`EXISTS` of the
-- waiter count and the queue). Each registration is answered by one element, and one
-- element wakes one `BLPOP`: a release never stampedes the waiters, and two releases in
-- a row wake two registered waiters.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local prefix = ARGV[3]
local waiters, queue = prefix .. 'waiters', prefix .. 'queue'
if redis.call('EXISTS', waiters, queue) == 0 then
  return 1
end
local waiting = tonumber(redis.call('GET', waiters) or '0')
if waiting > 0 then
  if waiting == 1 then
    redis.call('DEL', waiters)
  else
    redis.call('DECR', waiters)
  end
  local signal = prefix .. 'signal'
  redis.call('RPUSH', signal, 1)
  redis.call('PEXPIRE', signal, ARGV[2])
end
if redis.call('EXISTS', queue) == 1 then
  hand_turn(queue, prefix .. 'places', now_ms(), prefix .. 'turn:', ARGV[2])
end
return 1
