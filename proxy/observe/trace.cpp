#include "proxy/observe/trace.hpp"

#include "proxy/net.hpp"
#include "proxy/observe/json.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <algorithm>

namespace rebound::observe {
namespace {

template <std::size_t N>
void random_id(std::array<std::uint8_t, N>& id, std::mt19937_64& rng) {
  do {
    for (std::size_t i = 0; i < N; i += 8) {
      auto const x = rng();
      for (std::size_t j = 0; j < 8 && i + j < N; ++j) id[i + j] = static_cast<std::uint8_t>(x >> (8 * j));
    }
  } while (std::all_of(id.begin(), id.end(), [](std::uint8_t b) { return b == 0; }));
}

std::string nanos(std::chrono::system_clock::time_point t) {
  return std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

void write_attribute(json_writer& w, const span_attribute& a) {
  w.open_object().field("key", a.key).key("value").open_object();
  std::visit(
      [&w](auto const& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>)
          w.field("stringValue", v);
        else if constexpr (std::is_same_v<T, std::int64_t>)
          w.field("intValue", std::to_string(v));  // OTLP JSON: 64-bit integers as strings
        else if constexpr (std::is_same_v<T, double>)
          w.key("doubleValue").number(v, "%.17g");
        else
          w.field("boolValue", v);
      },
      a.value);
  w.close_object().close_object();
}

}  // namespace

std::string otlp_json(const std::vector<span>& spans, std::string_view service,
                      const std::vector<span_attribute>& resource) {
  std::string out;
  json_writer w(out);
  w.open_object().key("resourceSpans").open_array().open_object();
  w.key("resource").open_object().key("attributes").open_array();
  write_attribute(w, {"service.name", std::string(service)});
  for (auto const& a : resource)
    if (a.key != "service.name") write_attribute(w, a);
  w.close_array().close_object();
  w.key("scopeSpans").open_array().open_object();
  w.key("scope").open_object().field("name", "rebound").field("version", REBOUND_VERSION).close_object();
  w.key("spans").open_array();
  for (auto const& s : spans) {
    w.open_object()
        .field("traceId", hex(s.trace.data(), s.trace.size()))
        .field("spanId", hex(s.id.data(), s.id.size()));
    if (s.parent) w.field("parentSpanId", hex(s.parent->data(), s.parent->size()));
    w.field("name", s.name).field("kind", static_cast<int>(s.k));
    w.field("startTimeUnixNano", nanos(s.start)).field("endTimeUnixNano", nanos(s.end));
    w.key("attributes").open_array();
    for (auto const& a : s.attributes) write_attribute(w, a);
    w.close_array();
    w.key("status").open_object();
    if (s.error) w.field("code", 2).field("message", s.message);  // STATUS_CODE_ERROR
    w.close_object().close_object();
  }
  w.close_array().close_object().close_array();   // spans, scopeSpans
  w.close_object().close_array().close_object();  // resourceSpans
  return out;
}

tracer::tracer(trace_settings s, std::string service, metrics* m)
    : settings_(std::move(s)), service_(std::move(service)), metrics_(m) {
  queue_.reserve(settings_.max_queue);
  thread_ = std::thread([this] { run(); });
}

tracer::~tracer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    // A collector that does not answer must not hold the process past its drain.
    if (exporting_) exporting_->stop();
  }
  wake_.notify_one();
  thread_.join();
}

request_trace tracer::begin(std::string_view traceparent, std::mt19937_64& rng) const {
  request_trace t;
  if (auto p = traceparent.empty() ? std::nullopt : parse_traceparent(traceparent)) {
    t.trace = p->trace;
    t.parent = p->parent;
    // The caller decided (a trace is recorded whole or not at all), unless the sampler is
    // told to decide every trace itself.
    t.sampled = settings_.follow_caller
                    ? p->sampled
                    : std::uniform_real_distribution<double>(0.0, 1.0)(rng) < settings_.sample_ratio;
  } else {
    random_id(t.trace, rng);
    t.sampled = std::uniform_real_distribution<double>(0.0, 1.0)(rng) < settings_.sample_ratio;
  }
  if (t.sampled) random_id(t.request, rng);
  return t;
}

request_trace tracer::begin_task(std::string_view traceparent, std::string_view task_id, std::int64_t window,
                                 std::mt19937_64& rng) const {
  // FNV-1a, seeded: the same task id names the same trace and span in every process.
  auto fnv = [task_id](std::uint64_t h) {
    for (unsigned char c : task_id) h = (h ^ c) * 0x100000001b3ull;
    return h;
  };
  request_trace t;
  if (!traceparent.empty() && parse_traceparent(traceparent)) {
    t = begin(traceparent, rng);
  } else {
    std::uint64_t const a = fnv(0xcbf29ce484222325ull), b = fnv(0x84222325cbf29ce4ull);
    for (std::size_t i = 0; i < 8; ++i) {
      t.trace[i] = static_cast<std::uint8_t>(a >> (8 * i));
      t.trace[8 + i] = static_cast<std::uint8_t>(b >> (8 * i));
    }
    if (a == 0 && b == 0) t.trace[0] = 1;  // an all-zero id is invalid
    t.sampled = static_cast<double>(a >> 11) * 0x1.0p-53 < settings_.sample_ratio;
  }
  std::uint64_t span = fnv(0x9e3779b97f4a7c15ull ^ static_cast<std::uint64_t>(window));
  if (span == 0) span = 1;  // an all-zero id is invalid
  for (std::size_t i = 0; i < 8; ++i) t.request[i] = static_cast<std::uint8_t>(span >> (8 * i));
  return t;
}

span_id tracer::new_span_id(std::mt19937_64& rng) {
  span_id id;
  random_id(id, rng);
  return id;
}

void tracer::record(span s) {
  {
    std::lock_guard lock(mutex_);
    if (queue_.size() < settings_.max_queue) {
      queue_.push_back(std::move(s));
      if (queue_.size() >= settings_.batch) wake_.notify_one();
      return;
    }
  }
  if (metrics_) metrics_->spans_dropped("queue_full", 1);
}

void tracer::run() {
  std::vector<span> batch;
  for (;;) {
    bool last = false;
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, settings_.flush_every, [this] { return stopping_ || queue_.size() >= settings_.batch; });
      // At the stop, what is queued goes in one last batch.
      auto const n = stopping_ ? queue_.size() : std::min(queue_.size(), settings_.batch);
      batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.begin() + n));
      queue_.erase(queue_.begin(), queue_.begin() + n);
      last = stopping_;
      if (batch.empty() && stopping_) return;
    }
    if (batch.empty()) continue;
    bool const sent = post(otlp_json(batch, service_, settings_.resource), last);
    if (metrics_) {
      if (sent)
        metrics_->spans_exported(batch.size());
      else
        metrics_->spans_dropped("export_failed", batch.size());
    }
    batch.clear();
    if (last) return;
  }
}

bool tracer::post(const std::string& body, bool last) {
  if (!settings_.send) return false;
  // Its own io_context per batch: a batch a second at most, and nothing held between them.
  net::io_context ioc;
  bool ok = false;
  auto const timeout = last ? std::min(settings_.timeout, std::chrono::milliseconds(1000)) : settings_.timeout;
  auto const deadline = std::chrono::steady_clock::now() + timeout;
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        auto op = settings_.send(body, deadline);  // made, then awaited (the GCC 12 rule)
        ok = co_await std::move(op);
      },
      net::detached);
  if (!last) {
    std::lock_guard lock(mutex_);
    if (stopping_) return false;  // stopped meanwhile: the next turn makes the last, short export
    exporting_ = &ioc;
  }
  ioc.run();
  if (!last) {
    std::lock_guard lock(mutex_);
    exporting_ = nullptr;
  }
  return ok;
}

}  // namespace rebound::observe
