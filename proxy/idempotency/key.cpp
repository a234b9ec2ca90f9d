#include "proxy/idempotency/key.hpp"

#include "config/config.hpp"

#include <openssl/rand.h>

#include <array>
#include <cstring>

namespace rebound::idempotency {

namespace bhttp = boost::beast::http;

bool retry_safe_method(bhttp::verb v) { return retry::idempotent_method(bhttp::to_string(v)); }

bool needs_key(bhttp::verb v) { return v == bhttp::verb::post || v == bhttp::verb::patch; }

std::optional<std::string> key_problem(std::string_view key) {
  if (key.empty()) return "the idempotency key is empty";
  if (key.size() > max_key_length)
    return "the idempotency key has " + std::to_string(key.size()) + " characters; at most 64 are allowed (R-6)";
  for (char c : key) {
    auto const u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e) return "the idempotency key must be printable ASCII";
    if (c == '"' || c == '\\' || c == ',')
      return "the idempotency key may not hold '\"', '\\' or ',' (a comma is two keys in one field)";
  }
  return std::nullopt;
}

std::string_view key_in_field(std::string_view value) {
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') return value.substr(1, value.size() - 2);
  return value;
}

key_plan plan_key(const sent_key& sent, bhttp::verb method, bool inject, key_need need) {
  key_plan plan;
  if (sent.repeated) {
    plan.refusal = "more than one idempotency key field: which one is meant is unknown (R-6)";
    return plan;
  }
  if (sent.value) {
    auto const key = key_in_field(*sent.value);
    if (auto problem = key_problem(key)) {
      plan.refusal = std::move(problem);
      return plan;
    }
    plan.key = key;
  }
  bool const wants_key = need == key_need::always || needs_key(method);
  if (!wants_key) {
    plan.may_retry = retry_safe_method(method);
    if (!plan.may_retry) plan.why_not = "the method is not idempotent (R-6)";
    return plan;
  }
  if (plan.key.empty() && (inject || need == key_need::always)) {
    if (auto k = new_key()) {
      plan.key = std::move(*k);
      plan.made = true;
    } else {
      plan.why_not = "no idempotency key could be generated";
      return plan;
    }
  }
  plan.may_retry = !plan.key.empty();
  if (!plan.may_retry) plan.why_not = "POST/PATCH without an idempotency key, and idempotency.inject is false (R-6)";
  return plan;
}

namespace {

/** 16 bytes of OpenSSL's CSPRNG, each byte handed out once. A RAND_bytes call per key cost
    ~6,600 instructions and a getpid (OpenSSL's fork check) on every POST; a thread now draws
    4 KiB at a time, 256 keys' worth. A cache per thread, as head_fields.cpp's block lists:
    rebound never forks after start-up (it only execs itself, proxy/main.cpp). */
bool random_16(std::array<unsigned char, 16>& out) {
  struct drawn {
    std::array<unsigned char, 4096> bytes;
    std::size_t used = 4096;
  };
  thread_local drawn pool;
  if (pool.used == pool.bytes.size()) {
    if (RAND_bytes(pool.bytes.data(), static_cast<int>(pool.bytes.size())) != 1) return false;
    pool.used = 0;
  }
  std::memcpy(out.data(), pool.bytes.data() + pool.used, out.size());
  pool.used += out.size();
  return true;
}

}  // namespace

std::optional<std::string> new_key() {
  std::array<unsigned char, 16> b;
  if (!random_16(b)) return std::nullopt;
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
