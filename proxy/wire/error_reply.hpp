#pragma once
/** An answer rebound makes itself (SPEC section 6), as a value: what every way in decides
    when it refuses or fails a request, before it is written as HTTP/1.1 (error_response.hpp),
    a gRPC status or an admin API error. Beast-free, so the rules that make one stay light. */
#include "proxy/retry/error_type.hpp"

#include <string>

namespace rebound::http {

// The error vocabulary lives with the retry rules that read it; the answers are made here.
using retry::default_retry_after_s;
using retry::default_status;
using retry::error_type;
using retry::to_string;

struct error_reply {
  unsigned status = 502;
  error_type type = error_type::upstream_protocol_error;
  std::string message;
  std::string dependency;  ///< empty when no dependency was resolved yet
  unsigned attempts = 0;
  unsigned retry_after_s = 0;  ///< > 0: sent as Retry-After (circuit_open: time until a probe may go)
  bool gave_up = false;        ///< retried and gave up: `Rebound-Retried: exhausted` (retry/layers.hpp)
};

}  // namespace rebound::http
