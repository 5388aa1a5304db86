-- The numbering of wrk's threads that every bench script shares: `setup` gives each
-- thread its `id`, which a script's salt carries to keep one thread's keys apart from
-- another's. A script loads it with `dofile`, by its path beside this file.

local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end
