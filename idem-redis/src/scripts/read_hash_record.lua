-- Reads a record in the layout earlier versions wrote (a hash: state, owner, fingerprint,
-- response), which instances not yet upgraded may still write; it never writes one.
-- KEYS[1] the record; ARGV[1] fingerprint
-- Returns {0} when the key holds no such record (gone, or a string now); {2, pttl} in
-- progress; {3, response, pttl} completed; {4} another fingerprint.
local record = redis.pcall('HMGET', KEYS[1], 'state', 'fingerprint', 'response')
if record.err or not record[1] then
  return {0}
end
if record[2] ~= ARGV[1] then
  return {4}
end
if record[1] == 'done' then
  return {3, record[3], redis.call('PTTL', KEYS[1])}
end
return {2, redis.call('PTTL', KEYS[1])}
