-- Spends a one-time token: removes it from its scope and its bucket. The removal is the
-- check, so of concurrent callers exactly one sees the token.
-- KEYS[1] the bucket's tokens, KEYS[2] the scope's tokens (see put_token.lua)
-- ARGV[1] token. Returns 1 if the token was there and had not expired, else 0.
-- A token already spent (the second post of a double click) costs one call: `TIME` only
-- for a token found.
if redis.replicate_commands then redis.replicate_commands() end
local expiry = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not expiry then
  return 0
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], KEYS[2] .. '\n' .. ARGV[1])
if tonumber(expiry) <= now then
  return 0
end
return 1
