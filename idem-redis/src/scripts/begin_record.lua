-- Starts an idempotency record, or reports the one there is.
-- KEYS[1] the record (a hash: state, owner, fingerprint, response)
-- ARGV[1] owner, ARGV[2] fingerprint, ARGV[3] lease in milliseconds
-- Returns {1} started; {2, pttl} in progress; {3, response, pttl} completed; {4} other
-- fingerprint.
local record = redis.call('HMGET', KEYS[1], 'state', 'fingerprint', 'response')
if not record[1] then
  redis.call('HSET', KEYS[1], 'state', 'running', 'owner', ARGV[1], 'fingerprint', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1}
end
if record[2] ~= ARGV[2] then
  return {4}
end
if record[1] == 'done' then
  return {3, record[3], redis.call('PTTL', KEYS[1])}
end
return {2, redis.call('PTTL', KEYS[1])}
