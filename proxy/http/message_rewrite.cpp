#include "proxy/http/message_rewrite.hpp"

#include "proxy/upstream/tls_client.hpp"

#include "proxy/wire/hop_by_hop.hpp"
#include "proxy/wire/upgrade.hpp"
#include "proxy/retry/layers.hpp"

#include <array>
#include <charconv>
#include <iterator>

namespace rebound::http {

void prepare_upstream_request(request_message<bhttp::buffer_body>& req,
                              const request_parser& p, const plan::request_target& t,
                              std::string_view via_token) {
  strip_hop_by_hop(req.base());
  add_via(req.base(), req.version(), via_token);
  // Most requests already carry their origin form (Host-routed): Beast would copy it anew.
  if (req.target() != t.origin_form) req.target(t.origin_form);
  req.set(bhttp::field::host, t.authority);
  req.version(11);
  if (p.chunked())
    req.chunked(true);
  else if (auto cl = p.content_length())
    req.content_length(*cl);  // collapses a valid "42, 42"
}

bool prepare_client_response(response_parser& p, const client_side& client) {
  auto& f = p.fields();
  bool client_keep_alive = client.keep_alive;
  strip_hop_by_hop(f);
  add_via(f, p.get().version());
  auto const status = p.get().result_int();
  bool const has_body = !(client.is_head || status / 100 == 1 || status == 204 || status == 304);
  if (has_body) {
    if (auto cl = p.content_length(); cl && !p.chunked()) {
      std::array<char, 24> digits{};
      auto const [end, ec] = std::to_chars(digits.data(), digits.data() + digits.size(), *cl);
      f.set(bhttp::field::content_length, std::string_view(digits.data(), static_cast<std::size_t>(end - digits.data())));
    } else if (client.version >= 11) {
      // chunked or close-delimited upstream: re-framed so the client can keep the connection
      f.erase(bhttp::field::content_length);
      f.set(bhttp::field::transfer_encoding, "chunked");
    } else {
      client_keep_alive = false;  // an HTTP/1.0 client learns the end from the close
    }
  }
  std::array<char, 12> attempts{};
  auto const [end, ec] = std::to_chars(attempts.data(), attempts.data() + attempts.size(), client.attempts);
  f.set("Rebound-Attempts", std::string_view(attempts.data(), static_cast<std::size_t>(end - attempts.data())));
  if (client.gave_up) f.set(retry::retried_header, retry::retried_exhausted);
  // The client's head is HTTP/1.1 (wire_head.hpp), which keeps the connection unless told.
  if (!client_keep_alive)
    f.set(bhttp::field::connection, "close");
  else if (client.version < 11)
    f.set(bhttp::field::connection, "keep-alive");
  return client_keep_alive;
}

void prepare_switch_response(response_parser& p, unsigned attempts) {
  auto& f = p.fields();
  strip_hop_by_hop(f);
  carry_websocket_upgrade(f);
  add_via(f, p.get().version());
  f.erase(bhttp::field::content_length);
  f.set("Rebound-Attempts", std::to_string(attempts));
}

}  // namespace rebound::http
