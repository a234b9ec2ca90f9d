#pragma once
/** The inbound gate's spans (issue 48; server-side idempotency is seed 004's subject): each
    request through the gate is a SERVER span with its key and what the gate did with it
    (`rebound.idempotency_status`: stored, replayed, not-stored, mismatch, in_flight,
    refused), and the call to the app, when there is one, its CLIENT child, whose id goes to
    the app in `traceparent`. A duplicate answered from the store is a span without a child:
    visibly never at the app. Nothing is recorded without a tracer or for an unsampled trace. */
#include "proxy/wire/head_fields.hpp"
#include "proxy/observe/trace.hpp"
#include "proxy/retry/step.hpp"

#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace rebound::inbound {

class gate_trace {
 public:
  /// `facts` views the request (its method, target, dependency): they outlive this.
  gate_trace(observe::tracer* tracer, std::mt19937_64& rng, std::string_view traceparent,
             const retry::request_facts& facts);
  /// Records the request's span, however the gate ended.
  ~gate_trace();
  gate_trace(const gate_trace&) = delete;
  gate_trace& operator=(const gate_trace&) = delete;

  void key(std::string_view k) { key_ = k; }
  void status(std::string_view s) { status_ = s; }
  void answered(unsigned code) { code_ = code; }
  /// The app is about to be called: its span starts, and its id goes in `req`'s traceparent.
  void app_call_starts(http::head_fields& req);
  /// What the call came to: the app's status, or the error type why none came.
  void app_call_ended(std::optional<unsigned> status, std::string_view error);

 private:
  observe::tracer* tracer_;
  std::mt19937_64& rng_;
  retry::request_facts facts_;
  observe::request_trace trace_;
  std::chrono::system_clock::time_point start_{};
  std::string key_;
  std::string status_;
  std::optional<unsigned> code_;
  observe::span_id app_{};
  std::chrono::system_clock::time_point app_start_{};
};

}  // namespace rebound::inbound
