#include "proxy/inbound/gate_trace.hpp"

#include "proxy/observe/traceparent.hpp"
#include "proxy/retry/loop.hpp"

namespace rebound::inbound {

gate_trace::gate_trace(observe::tracer* tracer, std::mt19937_64& rng, std::string_view traceparent,
                       const retry::request_facts& facts)
    : tracer_(tracer), rng_(rng), facts_(facts), trace_(tracer ? tracer->begin(traceparent, rng) : observe::request_trace{}) {
  if (trace_.sampled) start_ = std::chrono::system_clock::now();
}

gate_trace::~gate_trace() {
  if (!trace_.sampled) return;
  auto f = facts_;
  f.idempotency_key = key_;
  auto s = retry::traced_span(f, trace_.trace, trace_.request, trace_.parent, start_, observe::span::kind::server);
  if (!status_.empty()) s.attributes.push_back({"rebound.idempotency_status", status_});
  if (code_) {
    s.attributes.push_back({"http.response.status_code", std::int64_t{*code_}});
    s.error = *code_ >= 500;
  }
  tracer_->record(std::move(s));
}

void gate_trace::app_call_starts(http::head_fields& req) {
  if (!trace_.sampled) return;
  app_ = observe::tracer::new_span_id(rng_);
  app_start_ = std::chrono::system_clock::now();
  req.set("traceparent", observe::format_traceparent(trace_.trace, app_, true));
}

void gate_trace::app_call_ended(std::optional<unsigned> status, std::string_view error) {
  if (!trace_.sampled) return;
  auto f = facts_;
  f.idempotency_key = key_;
  auto s = retry::traced_span(f, trace_.trace, app_, trace_.request, app_start_, observe::span::kind::client);
  if (status) {
    s.attributes.push_back({"http.response.status_code", std::int64_t{*status}});
    s.error = *status >= 500;
  }
  if (!error.empty()) {
    s.attributes.push_back({"error.type", std::string(error)});
    s.error = true;
  }
  tracer_->record(std::move(s));
}

}  // namespace rebound::inbound
