#include "proxy/idempotency/key.hpp"

#include <openssl/rand.h>

#include <array>

namespace rebound::idempotency {

namespace bhttp = boost::beast::http;

bool retry_safe_method(bhttp::verb v) {
  return v == bhttp::verb::get || v == bhttp::verb::head || v == bhttp::verb::options || v == bhttp::verb::put ||
         v == bhttp::verb::delete_;
}

bool needs_key(bhttp::verb v) { return v == bhttp::verb::post || v == bhttp::verb::patch; }

std::optional<std::string> key_problem(std::string_view key) {
  if (key.empty()) return "the idempotency key is empty";
  if (key.size() > max_key_length)
    return "the idempotency key has " + std::to_string(key.size()) + " characters; at most 64 are allowed (R-6)";
  for (char c : key) {
    auto const u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e) return "the idempotency key must be printable ASCII";
  }
  return std::nullopt;
}

std::optional<std::string> new_key() {
  std::array<unsigned char, 16> b;
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) return std::nullopt;
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // variant 10
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += hex[b[i] >> 4];
    out += hex[b[i] & 0xf];
  }
  return out;
}

}  // namespace rebound::idempotency
