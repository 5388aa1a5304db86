-- A waiter gives up its place, and any wake-up left for it; if it was at the head and
-- the lock is free, the turn passes to the new head.
-- KEYS[1] the lock, KEYS[2] its queue, KEYS[3] the places' lapse times, KEYS[4] the
-- caller's wake-ups (one hash tag, so one cluster slot)
-- ARGV[1] owner, ARGV[2] the prefix of every waiter's wake-up list, ARGV[3] how long a
-- wake-up is kept
-- Returns 1 if the caller had a place, else 0.
local owner = ARGV[1]
local was_first = redis.call('LINDEX', KEYS[2], 0) == owner
local removed = redis.call('LREM', KEYS[2], 1, owner)
redis.call('HDEL', KEYS[3], owner)
redis.call('DEL', KEYS[4])
if was_first and redis.call('EXISTS', KEYS[1]) == 0 then
  hand_turn(KEYS[2], KEYS[3], now_ms(), ARGV[2], ARGV[3])
end
return removed
