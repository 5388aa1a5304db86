-- The requests of one bench/peers.sh case, chosen by environment variables. wrk runs one
-- copy of this script per thread; `id` (set in `setup`) and a per-run salt keep every
-- thread's keys apart from other threads' and from earlier runs'.
--
--   PEERS_KEYS     same_key: one Idempotency-Key for the whole run (the first request runs
--                  the handler, every later one is a replay); new_key: a new key every
--                  request (first requests); none: no key (the bare handler)
--   PEERS_SESSION  none: no cookie; shared: one `session` cookie for the whole run;
--                  per_request: a new session id every request. axum-idempotent keeps its
--                  responses in the request's ruts session and caches nothing without one;
--                  ruts takes any well-formed id (22 URL-safe base64 characters) from the
--                  cookie as the session's.
--
-- Every request is a POST of an empty body with the same x-client (idem's client identity).

local counter = 0
-- `setup`, which numbers the threads.
dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "../../wrk/threads.lua")

local keys = os.getenv("PEERS_KEYS") or "none"
local sessions = os.getenv("PEERS_SESSION") or "none"
math.randomseed(os.time())
local stamp = string.format("%010d", (os.time() * 1000 + math.random(0, 999)) % 10000000000)
local salt = stamp

function init(args)
  salt = stamp .. "-" .. tostring(id)
end

-- 22 characters: 10 of the run, 2 of the thread, 9 of the request, and a last "A" (its low
-- bits are padding and must be zero).
local function session_id(n)
  return stamp .. string.format("%02d%09d", id % 100, n % 1000000000) .. "A"
end

function request()
  counter = counter + 1
  local headers = { ["x-client"] = "peers" }
  if keys == "same_key" then
    headers["idempotency-key"] = salt
  elseif keys == "new_key" then
    headers["idempotency-key"] = salt .. "-" .. counter
  end
  if sessions == "shared" then
    headers["cookie"] = "session=" .. session_id(0)
  elseif sessions == "per_request" then
    headers["cookie"] = "session=" .. session_id(counter)
  end
  return wrk.format("POST", nil, headers, nil)
end
