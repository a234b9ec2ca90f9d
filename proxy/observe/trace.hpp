#pragma once
/** Traces (issue 34, seed 004: "tag spans with idempotency_key and attempt"): W3C trace
    context continued from a request's `traceparent`, or started; one span for the request and
    one child span per attempt, whose id goes upstream in the attempt's own `traceparent`;
    exported as OTLP/HTTP with the JSON encoding, in batches, by a thread of its own, from a
    bounded queue that drops (and counts) rather than ever make a request wait or grow. Off
    unless `tracing.endpoint` is set. */
#include "proxy/net.hpp"
#include "proxy/observe/metrics.hpp"
#include "proxy/observe/traceparent.hpp"

#include <boost/asio/io_context.hpp>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

namespace rebound::observe {


struct span_attribute {
  std::string key;
  std::variant<std::string, std::int64_t, double, bool> value;
};

struct span {
  enum class kind { server = 2, client = 3 };  ///< OTLP's SpanKind numbers
  trace_id trace{};
  span_id id{};
  std::optional<span_id> parent;
  std::string name;
  kind k = kind::client;
  std::chrono::system_clock::time_point start, end;
  std::vector<span_attribute> attributes;
  bool error = false;  ///< OTLP status ERROR, with `message`; else UNSET
  std::string message;
};

/// An OTLP ExportTraceServiceRequest in its JSON encoding (OTLP 1.0: ids as hex, 64-bit
/// integers and times as decimal strings, enums as numbers). `resource`: attributes of the
/// resource beside service.name (OTEL_RESOURCE_ATTRIBUTES).
std::string otlp_json(const std::vector<span>& spans, std::string_view service,
                      const std::vector<span_attribute>& resource = {});

struct trace_settings {
  /** Posts one batch (its OTLP JSON body) to the collector by `deadline`; true when it took
      it. Made by the app (app/trace_export.cpp), which owns the connection, TLS and headers:
      the tracer only queues, batches and counts. Without one every export fails (counted). */
  std::function<net::awaitable<bool>(const std::string& body, std::chrono::steady_clock::time_point deadline)> send;
  std::vector<span_attribute> resource;         ///< beside service.name
  double sample_ratio = 1.0;                    ///< of the traces rebound starts
  /// A caller's sampled flag decides for its trace (the parentbased_ samplers); false: the
  /// ratio decides every trace (traceidratio, always_on, always_off).
  bool follow_caller = true;
  std::size_t max_queue = 2048;                 ///< spans waiting for export; more are dropped
  std::size_t batch = 512;                      ///< spans per export request at most
  std::chrono::milliseconds flush_every{1000};  ///< a partial batch waits no longer
  std::chrono::milliseconds timeout{5000};      ///< one export request, connect to answer
};

/// What a request's spans are part of: its trace, its own span, and whether it is recorded.
struct request_trace {
  bool sampled = false;
  trace_id trace{};
  span_id request{};
  std::optional<span_id> parent;  ///< the caller's span, when it sent a traceparent
};

class tracer {
 public:
  tracer(trace_settings s, std::string service, metrics* m);
  ~tracer();  ///< cuts an export under way; one last export of what is queued, 1 s at most
  tracer(const tracer&) = delete;
  tracer& operator=(const tracer&) = delete;

  /** The trace of a request that came with `traceparent` (empty: none): the caller's trace
      continued, recorded when the caller recorded it (W3C's sampled flag); or a new one,
      recorded at sample_ratio. `rng` is the worker's. */
  request_trace begin(std::string_view traceparent, std::mt19937_64& rng) const;
  /** The trace of a handed-over task's delivery: the caller's, as `begin` takes it, from the
      traceparent stored with the task; without one, a trace named by `task_id` and sampled by
      it, so each attempt, on whichever instance claims it, joins the same trace. `request` is
      the task's own span, named by `task_id` and `window` (its delivery window's start: a
      replay is a window of its own), the same on every instance: its attempts are its
      children, and whichever instance ends the task records it, from the accept to the end,
      under the caller's span or as the trace's one root. */
  request_trace begin_task(std::string_view traceparent, std::string_view task_id, std::int64_t window,
                           std::mt19937_64& rng) const;
  static span_id new_span_id(std::mt19937_64& rng);

  /// Queues a finished span for export; never waits: when the queue is full it is dropped
  /// and counted (trace_spans_dropped_total{reason="queue_full"}).
  void record(span s);

 private:
  void run();
  bool post(const std::string& body, bool last);

  trace_settings settings_;
  std::string service_;
  metrics* metrics_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<span> queue_;
  bool stopping_ = false;
  net::io_context* exporting_ = nullptr;  ///< the export under way, which a stop cuts short
  std::thread thread_;
};

}  // namespace rebound::observe
