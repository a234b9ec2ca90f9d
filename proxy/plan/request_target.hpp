#pragma once
/** Where a request goes (RFC 9112 section 3.2): absolute-form, what HTTP_PROXY clients send;
    origin-form plus Host, for sidecar-by-DNS use; authority-form for CONNECT.

    Pure string work, no I/O: the result says which upstream to connect to and what to
    send it, or why the request is refused (answered with 400). */
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rebound::upstream {
class tls_client;
}

namespace rebound::plan {

struct request_target {
  std::string scheme = "http";  ///< lower case
  std::string host;             ///< as in a Host header: IPv6 literals keep their brackets
  std::string connect_host;     ///< for the resolver: IPv6 literals without brackets
  std::uint16_t port = 80;
  std::string authority;    ///< the Host value to send: host, plus :port unless default
  std::string origin_form;  ///< path and query for the upstream request line
};

struct target_result {
  std::optional<request_target> value;
  std::string error;  ///< why the request is malformed, when !value
};

/** For every method but CONNECT. `host_header` is the Host field value, `host_count` the
    number of Host fields (RFC 9112: a request with none or several is a 400). Fills `t`
    (a fresh target) in place, as every request does on its way in; why it is malformed, else
    nullopt. */
std::optional<std::string> parse_request_target(request_target& t, std::string_view method, std::string_view target,
                                                std::string_view host_header, std::size_t host_count,
                                                unsigned version);
/// The same, as a value: for callers that read a target once (a task, a test).
target_result parse_request_target(std::string_view method, std::string_view target, std::string_view host_header,
                                   std::size_t host_count, unsigned version);

/// For CONNECT: `host:port`, port required (RFC 9110 section 9.3.6).
target_result parse_connect_target(std::string_view target);

/** The path of an origin-form target without its query: what routes match, and the only part
    of a target that may be logged. A view into `origin_form`. */
inline std::string_view path_of(std::string_view origin_form) { return origin_form.substr(0, origin_form.find('?')); }

/** The upstream pool slot of a target: one per (scheme, host, port), and for an https
    origin per TLS client (`tls->identity()`): a connection verified against one dependency's
    CA, or presenting its client certificate, must never carry another dependency's request. */
std::string pool_key(const request_target& t, const upstream::tls_client* tls);

}  // namespace rebound::plan
