#include "proxy/retry/grpc_timeout.hpp"

#include <algorithm>
#include <charconv>

namespace rebound::retry {

std::optional<std::chrono::microseconds> parse_grpc_timeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  auto const digits = value.substr(0, value.size() - 1);
  for (char c : digits)
    if (c < '0' || c > '9') return std::nullopt;
  std::uint64_t n = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), n);  // at most 8 digits: no overflow
  using namespace std::chrono;
  // No unit times 8 digits overflows microseconds (99999999H is 3.6e17 us); only the clock's
  // time_point would.
  switch (value.back()) {
    case 'H':
      return std::min(duration_cast<microseconds>(hours(n)), longest_grpc_timeout);
    case 'M':
      return std::min(duration_cast<microseconds>(minutes(n)), longest_grpc_timeout);
    case 'S':
      return std::min(duration_cast<microseconds>(seconds(n)), longest_grpc_timeout);
    case 'm':
      return duration_cast<microseconds>(milliseconds(n));
    case 'u':
      return microseconds(n);
    case 'n':
      return duration_cast<microseconds>(nanoseconds(n));
    default:
      return std::nullopt;
  }
}

std::string format_grpc_timeout(std::chrono::microseconds left) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count();
  if (ms < 1) ms = 1;
  if (ms <= 99'999'999) return std::to_string(ms) + "m";
  auto const s = std::min<long long>(ms / 1000, 99'999'999);
  return std::to_string(s) + "S";
}

}  // namespace rebound::retry
