-- One request shape for every workload of bench/vs_openbao.py, read from the environment so the
-- token never appears on a command line: BENCH_METHOD, BENCH_BODY (JSON, optional), BENCH_TOKEN.
-- wrk itself only counts answers >= 400 as errors; this counts every answer that is not a 200
-- and prints "Not-200 responses: N" at the end.
wrk.method = os.getenv("BENCH_METHOD") or "GET"
local body = os.getenv("BENCH_BODY") or ""
if body ~= "" then
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
end
local token = os.getenv("BENCH_TOKEN") or ""
if token ~= "" then
  wrk.headers["X-Vault-Token"] = token
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

not200 = 0

function response(status, headers, body)
  if status ~= 200 then
    not200 = not200 + 1
  end
end

function done(summary, latency, requests)
  local n = 0
  for _, thread in ipairs(threads) do
    n = n + thread:get("not200")
  end
  io.write(string.format("Not-200 responses: %d\n", n))
end
