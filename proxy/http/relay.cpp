#include "proxy/http/relay.hpp"

#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <array>

namespace rebound::http {
namespace {

constexpr std::size_t chunk_size = 16 * 1024;

template <bool isRequest, class From, class To>
net::awaitable<relay_result> relay(From& from, beast::flat_buffer& buffer,
                                   bhttp::parser<isRequest, bhttp::buffer_body>& p, To& to,
                                   bhttp::serializer<isRequest, bhttp::buffer_body>& sr, std::chrono::milliseconds idle,
                                   std::string_view prefix) {
  std::array<char, chunk_size> chunk;
  auto& body = p.get().body();
  if (!prefix.empty()) {
    body.data = const_cast<char*>(prefix.data());
    body.size = prefix.size();
    body.more = !p.is_done();
    to.expires_after(idle);
    auto [ec, n] = co_await bhttp::async_write(to, sr, use_tuple);
    if (ec && ec != bhttp::error::need_buffer) co_return relay_result{{}, ec};
  }
  // The head goes out at once when no body bytes wait to go with it: a client should see
  // the status before a slow body. Otherwise head and first bytes share one write (one
  // syscall fewer per exchange, the common case for small messages).
  if (!sr.is_header_done() && !p.is_done() && buffer.size() == 0) {
    to.expires_after(idle);
    auto [ec, n] = co_await bhttp::async_write_header(to, sr, use_tuple);
    if (ec) co_return relay_result{{}, ec};
  }
  while (!sr.is_done()) {
    if (!p.is_done()) {
      body.data = chunk.data();
      body.size = chunk.size();
      from.expires_after(idle);
      // read_some, not read: read waits until the chunk is full, which would hold back a
      // slow stream's first bytes.
      auto [ec, n] = co_await bhttp::async_read_some(from, buffer, p, use_tuple);
      if (ec == net::ssl::error::stream_truncated) {
        // A TLS server closed without close_notify: the end of a body that runs to the
        // close, or a cut message; the parser tells which, as Beast does for TCP's EOF.
        error_code eof_ec;
        p.put_eof(eof_ec);
        ec = eof_ec ? error_code(bhttp::error::partial_message) : error_code{};
      }
      if (ec && ec != bhttp::error::need_buffer) co_return relay_result{ec, {}};
      auto const got = chunk.size() - body.size;
      if (got == 0 && !p.is_done()) continue;  // only framing was parsed
      body.data = got ? chunk.data() : nullptr;
      body.size = got;
      body.more = !p.is_done();
    } else {
      body.data = nullptr;
      body.size = 0;
      body.more = false;
    }
    to.expires_after(idle);
    auto [ec, n] = co_await bhttp::async_write(to, sr, use_tuple);
    if (ec && ec != bhttp::error::need_buffer) co_return relay_result{{}, ec};
  }
  co_return relay_result{};
}

}  // namespace

net::awaitable<relay_result> relay_request_body(beast::tcp_stream& from, beast::flat_buffer& buffer,
                                                request_parser& p, upstream::connection& to,
                                                bhttp::request_serializer<bhttp::buffer_body>& sr,
                                                std::chrono::milliseconds idle, std::string_view prefix) {
  return relay<true>(from, buffer, p, to, sr, idle, prefix);
}

net::awaitable<relay_result> relay_response_body(upstream::connection& from, beast::flat_buffer& buffer,
                                                 response_parser& p, beast::tcp_stream& to,
                                                 bhttp::response_serializer<bhttp::buffer_body>& sr,
                                                 std::chrono::milliseconds idle) {
  return relay<false>(from, buffer, p, to, sr, idle, {});
}

}  // namespace rebound::http
