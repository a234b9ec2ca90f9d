// RFC 9112 section 3.2: the request-target (absolute-, origin-, authority-form) and Host,
// straight from the client. Input: method, target and Host separated by newlines; the
// first byte picks the HTTP version and how many Host fields the request had.
#include "proxy/http/message_rewrite.hpp"
#include "proxy/plan/request_target.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  unsigned const version = (data[0] & 1) ? 10 : 11;
  std::size_t const host_count = (data[0] >> 1) & 3;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  auto next = [&rest] {
    auto const nl = rest.find('\n');
    auto const part = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    return part;
  };
  auto const method = next();
  auto const target = next();
  auto const host = rest;

  auto const r = rebound::plan::parse_request_target(method, target, host, host_count, version);
  if (r.value) {
    // What was accepted must be usable: a host to connect to and a path to send.
    if (r.value->connect_host.empty() || r.value->origin_form.empty() ||
        r.value->origin_form.find_first_of("\r\n ") != std::string::npos)
      std::abort();
    (void)rebound::plan::pool_key(*r.value, nullptr);
  }
  auto const c = rebound::plan::parse_connect_target(target);
  if (c.value && c.value->connect_host.empty()) std::abort();
  return 0;
}
