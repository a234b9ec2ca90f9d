#include "proxy/retry/classify.hpp"

#include <array>
#include <string>

namespace rebound::retry {
namespace {

struct name_of {
  std::string_view name;
  retry_on::cls c;
};
constexpr std::array<name_of, 15> retryable_names{{
    {"408", retry_on::cls::s408},
    {"429", retry_on::cls::s429},
    {"500", retry_on::cls::s500},
    {"502", retry_on::cls::s502},
    {"503", retry_on::cls::s503},
    {"504", retry_on::cls::s504},
    {"connect_refused", retry_on::cls::connect_refused},
    {"connect_reset", retry_on::cls::connect_reset},
    {"timeout", retry_on::cls::timeout},
    {"dns_failure", retry_on::cls::dns_failure},
    {"tls_handshake_timeout", retry_on::cls::tls_handshake_timeout},
    {"grpc_unavailable", retry_on::cls::grpc_unavailable},
    {"grpc_deadline_exceeded", retry_on::cls::grpc_deadline_exceeded},
    {"grpc_resource_exhausted", retry_on::cls::grpc_resource_exhausted},
    {"grpc_aborted", retry_on::cls::grpc_aborted},
}};

/// R-4's non-retryable column, spelled as a config entry would name it.
constexpr std::array<std::string_view, 13> final_names{
    "400", "401", "403", "404", "409", "422", "tls_certificate", "auth_refresh_failed",
    "grpc_invalid_argument", "grpc_not_found", "grpc_permission_denied", "grpc_unauthenticated",
    "grpc_unimplemented"};

}  // namespace

retry_on retry_on::r4_default() {
  // Made once: every attempt asks for it, to record what R-4 says of its outcome.
  static const retry_on all = [] {
    retry_on r;
    for (auto const& n : retryable_names) r.add(n.c);
    return r;
  }();
  return all;
}

std::vector<std::string_view> retry_on::names() const {
  std::vector<std::string_view> out;
  for (auto const& n : retryable_names)
    if (contains(n.c)) out.push_back(n.name);
  return out;
}

retry_on::parse_result retry_on::parse(std::string_view entry) {
  for (auto const& n : retryable_names)
    if (n.name == entry) return {n.c, {}};
  for (auto f : final_names)
    if (f == entry)
      return {std::nullopt,
              "\"" + std::string(entry) + "\" is not retryable: retry_on may narrow the R-4 set, never widen it"};
  return {std::nullopt,
          "unknown retry class \"" + std::string(entry) +
              "\" (expected one of 408, 429, 500, 502, 503, 504, connect_refused, connect_reset, timeout, "
              "dns_failure, tls_handshake_timeout, grpc_unavailable, grpc_deadline_exceeded, grpc_resource_exhausted, "
              "grpc_aborted)"};
}

std::optional<retry_on::cls> retryable_class(const attempt_outcome& o) {
  using c = retry_on::cls;
  if (o.grpc_status) {
    switch (*o.grpc_status) {
      case 14:
        return c::grpc_unavailable;
      case 4:
        return c::grpc_deadline_exceeded;
      case 8:
        return c::grpc_resource_exhausted;
      case 10:
        return c::grpc_aborted;
      default:
        return std::nullopt;  // OK, and R-4's final column: INVALID_ARGUMENT, NOT_FOUND, ...
    }
  }
  if (o.status) {
    switch (*o.status) {
      case 408:
        return c::s408;
      case 429:
        return c::s429;
      case 500:
        return c::s500;
      case 502:
        return c::s502;
      case 503:
        return c::s503;
      case 504:
        return c::s504;
      default:
        return std::nullopt;
    }
  }
  if (!o.error) return std::nullopt;
  switch (*o.error) {
    case error_type::connect_refused:
      return c::connect_refused;
    case error_type::connect_reset:
      return c::connect_reset;
    case error_type::connect_timeout:
    case error_type::attempt_timeout:
      return c::timeout;
    case error_type::dns_failure:
      return c::dns_failure;
    case error_type::tls_handshake_timeout:
      return c::tls_handshake_timeout;
    default:
      return std::nullopt;  // tls_certificate, protocol errors, auth: final
  }
}

std::string outcome_name(const attempt_outcome& o) {
  if (o.grpc_status) return "grpc_" + std::to_string(*o.grpc_status);
  if (o.status) return "http_" + std::to_string(*o.status);
  return o.error ? std::string(to_string(*o.error)) : std::string("none");
}

verdict classify(const attempt_outcome& o, const retry_on& allowed) {
  if (auto c = retryable_class(o)) return allowed.contains(*c) ? verdict::retryable : verdict::final;
  // A gRPC call fails with HTTP 200: only its grpc-status says how it went.
  if (o.grpc_status) return *o.grpc_status == 0 ? verdict::success : verdict::final;
  if (o.status && *o.status < 400) return verdict::success;
  if (o.status) return verdict::final;  // 4xx/5xx outside the table: the upstream's answer stands
  return verdict::final;
}

}  // namespace rebound::retry
