#include "proxy/h2/server_connection.hpp"

#include "proxy/h2/server_state.hpp"

#include <algorithm>

namespace rebound::h2 {

using detail::server_state;

preface_match match_preface(std::string_view bytes) {
  auto const n = std::min(bytes.size(), client_preface.size());
  if (bytes.substr(0, n) != client_preface.substr(0, n)) return preface_match::no;
  return n == client_preface.size() ? preface_match::yes : preface_match::maybe;
}

net::awaitable<void> serve(beast::tcp_stream& stream, beast::flat_buffer& preread, const server_limits& limits,
                           handlers handler, session_signals signals) {
  server_state state(stream, limits, std::move(handler), signals);
  co_await state.run(preread);
}

net::awaitable<void> serve(beast::tcp_stream& stream, beast::flat_buffer& preread, const server_limits& limits,
                           request_handler handler, session_signals signals) {
  server_state state(stream, limits, answer_whole(std::move(handler)), signals);
  co_await state.run(preread);
}

handlers answer_whole(request_handler h) {
  return handlers{[h = std::move(h)](fields&) { return call_handler{h, {}}; }, {}};
}

}  // namespace rebound::h2
