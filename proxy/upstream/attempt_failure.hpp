#pragma once
/** Why an attempt brought back no response: a value, light enough for the pure retry rules
    and their tests to name without the exchange's Beast and Asio headers. */
#include "proxy/retry/error_type.hpp"

#include <string>

namespace rebound::upstream {

struct attempt_failure {
  retry::error_type type;
  std::string message;
  /** Whether the upstream may have seen any of the request. False only where the attempt
      provably ended before a byte went out (no connection, no credential): what the inbound
      gate needs to know before it frees a key. */
  bool may_have_reached = true;
};

}  // namespace rebound::upstream
