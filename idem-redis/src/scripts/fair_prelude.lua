-- Shared by the scripts that touch a fair lock's queue (put before each of them).
-- A queue is a list of owners in arrival order (QUEUE) and a hash of when each owner's
-- place lapses, in milliseconds of the server's clock (PLACES). A waiter's wake-ups are
-- the list TURN_PREFIX .. owner. All of them share the lock's hash tag, so one slot.

local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The owner at the head of the queue once the lapsed places before it are dropped, or
-- false.
local function head(queue, places, now)
  local first = redis.call('LINDEX', queue, 0)
  while first do
    local lapses_at = tonumber(redis.call('HGET', places, first) or '0')
    if lapses_at > now then
      return first
    end
    redis.call('LPOP', queue)
    redis.call('HDEL', places, first)
    first = redis.call('LINDEX', queue, 0)
  end
  return false
end

-- Leaves the head of the queue a wake-up, kept for KEPT milliseconds, unless one waits
-- for it already.
local function hand_turn(queue, places, now, turn_prefix, kept)
  local first = head(queue, places, now)
  if first then
    local turn = turn_prefix .. first
    if redis.call('LLEN', turn) == 0 then
      redis.call('RPUSH', turn, 1)
    end
    redis.call('PEXPIRE', turn, kept)
  end
end

