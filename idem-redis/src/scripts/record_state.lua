-- What a record holds, for an operator: its value and its time left, read in one step.
-- KEYS[1] the record.
-- Returns {} when there is none; {pttl, value} for a record laid out as complete_record.lua
-- says; {pttl, state, fingerprint, response} for a record in the hash layout of earlier
-- versions (no response while it runs).
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  return {}
end
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'string' then
  return {pttl, value}
end
local fields = redis.call('HMGET', KEYS[1], 'state', 'fingerprint', 'response')
return {pttl, fields[1], fields[2], fields[3]}
