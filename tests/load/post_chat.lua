-- wrk script: every request posts the same greedy chat completion (32 tokens, eos ignored so each
-- reply costs the same). Counts replies by status and adds up the generated tokens.
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"messages":[{"role":"user","content":"小明家养了一只猫"}],"temperature":0,"max_tokens":32,"ignore_eos":true}'

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  ok, busy, other, tokens = 0, 0, 0, 0
end

function response(status, headers, body)
  if status == 200 then
    ok = ok + 1
    local n = body:match('"completion_tokens":(%d+)')
    if n then tokens = tokens + tonumber(n) end
  elseif status == 503 then
    busy = busy + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local ok, busy, other, tokens = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    ok = ok + t:get("ok")
    busy = busy + t:get("busy")
    other = other + t:get("other")
    tokens = tokens + t:get("tokens")
  end
  local seconds = summary.duration / 1e6
  local e = summary.errors
  local socket_errors = e.connect + e.read + e.write + e.timeout
  io.write(string.format("requests/s: %.1f (%d requests in %.1f s)\n", summary.requests / seconds, summary.requests, seconds))
  io.write(string.format("completed (200)/s: %.1f; 200: %d, 503: %d\n", ok / seconds, ok, busy))
  io.write(string.format("latency p50: %.1f ms, p99: %.1f ms, max: %.1f ms (all replies, 503s included)\n",
                         latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
  io.write(string.format("tokens/s: %.1f (%d generated tokens)\n", tokens / seconds, tokens))
  io.write(string.format("non-503 failures: %d (other statuses %d, connect %d, read %d, write %d, timeout %d)\n",
                         other + socket_errors, other, e.connect, e.read, e.write, e.timeout))
end
