-- Stores the response of a record, only if it is still running and ARGV[1] began it: a
-- worker whose lease ran out cannot overwrite the attempt that replaced it.
-- KEYS[1] the record; ARGV[1] owner, ARGV[2] response, ARGV[3] retention in milliseconds
-- Returns 1 if stored, else 0.
local record = redis.call('HMGET', KEYS[1], 'state', 'owner')
if record[1] ~= 'running' or record[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'done', 'response', ARGV[2])
redis.call('HDEL', KEYS[1], 'owner')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
