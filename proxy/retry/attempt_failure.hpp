#pragma once
/** Why an attempt brought back no response: a value, light enough for the pure retry rules
    and their tests to name without the exchange's Beast and Asio headers. Every way of making
    an attempt (upstream/ for HTTP/1.1, h2/ for gRPC, CONNECT's connect) reports in it. */
#include "proxy/retry/error_type.hpp"

#include <boost/assert/source_location.hpp>

#include <string>

namespace rebound::retry {

struct attempt_failure {
  error_type type;
  std::string message;
  /** Whether the upstream may have seen any of the request. False only where the attempt
      provably ended before a byte went out (no connection, no credential): what the inbound
      gate needs to know before it frees a key. */
  bool may_have_reached = true;
};

/// Only reached by calling value() on a failed result holding an attempt_failure, which
/// nothing on the data path does.
[[noreturn]] void throw_exception_from_error(const attempt_failure& f, const boost::source_location& loc);

}  // namespace rebound::retry
