-- wrk script used by bench/run.sh for every run.
--
-- BENCH_TARGET_URL set (proxy runs): every request is sent in proxy form, as a client with
-- HTTP_PROXY does: "GET http://127.0.0.1:NGINXPORT/ HTTP/1.1" + "Host: 127.0.0.1:NGINXPORT",
-- to the proxy address given to wrk on its command line.
-- BENCH_TARGET_URL unset (direct run): plain origin-form requests to the URL given to wrk.
-- BENCH_POST_FILE set: every request is a POST with that file's bytes as its body.
--
-- done() prints one machine-readable line (latencies in microseconds, from the same
-- histogram `wrk --latency` prints) that run.sh parses, so no unit parsing of "1.23ms".
local target = os.getenv("BENCH_TARGET_URL")
if target and target ~= "" then
  wrk.path = target
  wrk.headers["Host"] = target:match("^%a+://([^/]+)")
end
local post = os.getenv("BENCH_POST_FILE")
if post and post ~= "" then
  local f = assert(io.open(post, "rb"))
  wrk.method = "POST"
  wrk.body = f:read("*a")
  f:close()
  wrk.headers["Content-Type"] = "application/octet-stream"
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d p50_us=%.0f p99_us=%.0f\n",
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
