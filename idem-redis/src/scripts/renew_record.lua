-- Extends the lease of a running record, only if ARGV[1] began it.
-- KEYS[1] the record; ARGV[1] owner, ARGV[2] lease in milliseconds. Returns 1 if extended, else 0.
local record = redis.call('HMGET', KEYS[1], 'state', 'owner')
if record[1] ~= 'running' or record[2] ~= ARGV[1] then
  return 0
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
