// The deadlines callers send: X-Request-Timeout (issue 22) and gRPC's grpc-timeout. Any value
// reads as a duration in range or as malformed; what rebound sends on reads back to no more
// than what was left, and formatting never overflows.
#include "proxy/retry/grpc_timeout.hpp"
#include "proxy/retry/request_timeout.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace std::chrono;
  std::string_view const value(reinterpret_cast<const char*>(data), size);

  auto const r = rebound::retry::parse_request_timeout(value);
  if (auto const* ms = std::get_if<milliseconds>(&r)) {
    if (ms->count() < 0 || *ms > rebound::retry::max_request_timeout) std::abort();
    auto const now = steady_clock::time_point{} + hours{1000};
    auto const sent = rebound::retry::format_request_timeout(now + *ms, now);
    auto const back = rebound::retry::parse_request_timeout(sent);
    auto const* again = std::get_if<milliseconds>(&back);
    if (!again || *again > *ms) std::abort();  // the next hop never gets more than was left
  } else if (std::get<rebound::retry::malformed_timeout>(r).why.empty()) {
    std::abort();  // a 400 says why
  }

  if (auto const g = rebound::retry::parse_grpc_timeout(value)) {
    if (g->count() < 0) std::abort();
    auto const sent = rebound::retry::format_grpc_timeout(*g);
    auto const back = rebound::retry::parse_grpc_timeout(sent);
    if (!back || *back > *g + milliseconds{1}) std::abort();
  }
  return 0;
}
