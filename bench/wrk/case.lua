-- The requests of one bench/http.sh case, chosen by the IDEM_CASE environment variable.
-- wrk runs one copy of this script per thread; `id` (set in `setup`) and a per-run salt
-- keep every thread's keys apart from other threads' and from earlier runs'.
--
--   fixed       POST, the same x-client every time (the bare handler)
--   new_client  POST, a new x-client every request: each one a new avoid_repeat key or
--               lock name
--   new_key     POST, one x-client, a new Idempotency-Key every request: first requests
--   same_key    POST, one x-client, one Idempotency-Key: the first request runs the
--               handler, every later one is a replay
--   form        GET <prefix>/form issues a token; the next request of the thread posts it
--               to <prefix>/order. Tokens wait in a per-thread stack: wrk gives a script
--               no way to tell its connections apart, and any token of the thread's one
--               client verifies, once.

local counter = 0
-- `setup`, which numbers the threads.
dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "threads.lua")

local mode = os.getenv("IDEM_CASE") or "fixed"
local salt = tostring(os.time()) .. "-" .. tostring(math.random(1000000000))
local tokens = {}

function init(args)
  salt = salt .. "-" .. tostring(id)
end

local function post(headers, body)
  return wrk.format("POST", nil, headers, body)
end

function request()
  counter = counter + 1
  if mode == "new_client" then
    return post({ ["x-client"] = salt .. "-" .. counter })
  elseif mode == "new_key" then
    return post({ ["x-client"] = salt, ["idempotency-key"] = salt .. "-" .. counter })
  elseif mode == "same_key" then
    return post({ ["x-client"] = salt, ["idempotency-key"] = salt })
  elseif mode == "form" then
    local token = table.remove(tokens)
    if token then
      return wrk.format("POST", wrk.path .. "/order", {
        ["x-client"] = salt,
        ["content-type"] = "application/x-www-form-urlencoded",
      }, "item=book&form_token=" .. token)
    end
    return wrk.format("GET", wrk.path .. "/form", { ["x-client"] = salt })
  end
  return post({ ["x-client"] = "bench" })
end

if mode == "form" then
  -- A page answers the token (22 characters), an order answers its item ("book").
  function response(status, headers, body)
    if status == 200 and #body == 22 then
      table.insert(tokens, body)
    end
  end
end
