-- Puts a one-time token in its scope; keeps the scope's newest tokens and the bucket's
-- budget, evicting the tokens that expire soonest (for one TTL, the oldest).
-- KEYS[1] the bucket's tokens (a sorted set of "<scope key>\n<token>" by expiry)
-- KEYS[2] the scope's tokens (a sorted set of tokens by expiry); both share a hash tag,
--         and so does every other scope of the bucket, whose key the members name
-- ARGV[1] token, ARGV[2] TTL in milliseconds, ARGV[3] tokens a scope keeps,
-- ARGV[4] tokens the bucket keeps, ARGV[5] '1' when the server takes `PEXPIRE … GT`
-- (Redis 7.0 on). Returns 1.
--
-- Times go to Redis as integers written by `string.format('%d')`: a Lua number handed to
-- `redis.call` is written with `%.17g`, whose floating-point formatting cost Redis more
-- than a call.
if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ttl = tonumber(ARGV[2])
local expiry = string.format('%d', now + ttl)

-- Removes bucket members from their scopes (not from the bucket).
local function leave_scopes(members)
  for _, member in ipairs(members) do
    local at = string.find(member, '\n', 1, true)
    redis.call('ZREM', string.sub(member, 1, at - 1), string.sub(member, at + 1))
  end
end

-- A few expired tokens leave with every put, so the bucket does not carry them for long.
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now), 'LIMIT', 0, 16)
if #expired > 0 then
  leave_scopes(expired)
  redis.call('ZREM', KEYS[1], unpack(expired))
end

redis.call('ZADD', KEYS[2], expiry, ARGV[1])
redis.call('ZADD', KEYS[1], expiry, KEYS[2] .. '\n' .. ARGV[1])

local scope_card = redis.call('ZCARD', KEYS[2])
local lapsed = scope_card - tonumber(ARGV[3])
if lapsed > 0 then
  local old = redis.call('ZRANGE', KEYS[2], 0, lapsed - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, lapsed - 1)
  for i, token in ipairs(old) do
    old[i] = KEYS[2] .. '\n' .. token
  end
  redis.call('ZREM', KEYS[1], unpack(old))
end

local bucket_card = redis.call('ZCARD', KEYS[1])
local over = bucket_card - tonumber(ARGV[4])
if over > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[1], over)
  local evicted = {}
  for i = 1, #popped, 2 do
    evicted[#evicted + 1] = popped[i]
  end
  leave_scopes(evicted)
end

-- Each set lives as long as its longest-lived token: one `PEXPIRE … GT` where the server
-- has it, which leaves a longer TTL alone; a set just made has none, and `GT` counts none
-- as for ever, so a set whose only token is this one (just made, or remade by this put)
-- takes the TTL as it is. Older servers read the TTL first.
local cards = {scope_card, bucket_card}
for i, key in ipairs(KEYS) do
  if ARGV[5] ~= '1' then
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ARGV[2])
    end
  elseif cards[i] == 1 then
    redis.call('PEXPIRE', key, ARGV[2])
  else
    redis.call('PEXPIRE', key, ARGV[2], 'GT')
  end
end
return 1
