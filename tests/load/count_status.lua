-- wrk script: count responses per HTTP status across all threads.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  codes = {}
end

function response(status, headers, body)
  codes[status] = (codes[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("codes")) do
      total[k] = (total[k] or 0) + v
    end
  end
  for k, v in pairs(total) do
    io.write(string.format("status %d %d\n", k, v))
  end
  io.write(string.format("errors connect=%d read=%d write=%d timeout=%d\n",
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout))
  io.write(string.format("latency_p50_us %d\nlatency_p99_us %d\n", latency:percentile(50), latency:percentile(99)))
end
