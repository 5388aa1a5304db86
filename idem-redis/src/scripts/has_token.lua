-- Looks at a one-time token without spending it.
-- KEYS[1] the scope's tokens (see put_token.lua)
-- ARGV[1] token. Returns 1 if the token is there and has not expired, else 0.
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry then
  return 0
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
if tonumber(expiry) <= now then
  return 0
end
return 1
