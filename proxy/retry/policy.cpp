// per context: the built-in retries and total time, and the ranges the standard
// allows (SPEC 2: context). The loader resolves policies with them; check.cpp enforces them.
// R-6's methods idempotent by themselves, and the YAML spelling of the policy's enums.
#include "proxy/retry/policy.hpp"

namespace rebound::retry {

bool idempotent_method(std::string_view m) {
  return m == "GET" || m == "HEAD" || m == "OPTIONS" || m == "PUT" || m == "DELETE";
}

unsigned builtin_max_retries(context_kind c) {
  switch (c) {
    case context_kind::async:
    case context_kind::webhook:
      return 5;
    default:
      return 3;
  }
}

duration builtin_total_timeout(context_kind c) {
  return c == context_kind::sync || c == context_kind::batch || c == context_kind::grpc
             ? duration(std::chrono::seconds(30))
             : duration(std::chrono::hours(24));
}

std::vector<duration> builtin_schedule(context_kind c) {
  using namespace std::chrono_literals;
  if (c != context_kind::webhook) return {};
  return {1s, 5s, 30s, 2min, 15min, 1h, 4h};
}

retry_range allowed_retries(context_kind c) {
  switch (c) {
    case context_kind::async:
      return {1, 10};
    case context_kind::webhook:
      return {3, 8};
    default:
      return {1, 5};
  }
}

duration max_total_timeout(context_kind c) {
  return c == context_kind::sync || c == context_kind::grpc ? duration(std::chrono::seconds(30))
                                                            : duration(std::chrono::hours(24));
}

std::string_view to_string(context_kind c) {
  switch (c) {
    case context_kind::sync:
      return "sync";
    case context_kind::async:
      return "async";
    case context_kind::webhook:
      return "webhook";
    case context_kind::batch:
      return "batch";
    case context_kind::grpc:
      return "grpc";
  }
  return "sync";
}

std::string_view to_string(breaker_mode m) {
  switch (m) {
    case breaker_mode::enforce:
      return "enforce";
    case breaker_mode::signal:
      return "signal";
    case breaker_mode::off:
      return "off";
  }
  return "enforce";
}

std::string_view to_string(concurrency_mode m) {
  switch (m) {
    case concurrency_mode::fixed:
      return "fixed";
    case concurrency_mode::adaptive:
      return "adaptive";
    case concurrency_mode::off:
      break;
  }
  return "off";
}

}  // namespace rebound::retry
