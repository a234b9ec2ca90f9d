#pragma once
/** What every reader of a header value in retry/ (Retry-After, the layer signals,
    X-Request-Timeout) does first: drop the optional whitespace around it (RFC 9110 section 5.5
    allows spaces and tabs), so each parser sees the value alone. */
#include <string_view>

namespace rebound::retry {

inline std::string_view trim_ows(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

}  // namespace rebound::retry
