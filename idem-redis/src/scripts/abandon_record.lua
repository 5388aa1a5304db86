-- Deletes a running record, only if ARGV[1] began it, so a retry runs afresh.
-- KEYS[1] the record; ARGV[1] owner. Returns 1 if deleted, else 0.
local record = redis.call('HMGET', KEYS[1], 'state', 'owner')
if record[1] ~= 'running' or record[2] ~= ARGV[1] then
  return 0
end
return redis.call('DEL', KEYS[1])
