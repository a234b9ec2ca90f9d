#include "proxy/http/relay.hpp"

#include "proxy/http/hop_by_hop.hpp"

#include <boost/asio/ssl/error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <array>

namespace rebound::http {
namespace {

constexpr std::size_t chunk_size = 16 * 1024;

/** The last chunk with the trailer fields that may travel on (RFC 9112 section 7.1.2).
    Fields that frame, route, authenticate or control the message are dropped: RFC 9110
    section 6.5.1 forbids them in trailers, and a next hop that merged them would trust
    them as headers. */
std::string last_chunk_with(const bhttp::fields& trailers) {
  std::string out = "0\r\n";
  for (auto const& f : trailers) {
    if (!forwardable_trailer(f.name(), f.name_string())) continue;
    out.append(f.name_string().data(), f.name_string().size());
    out += ": ";
    out.append(f.value().data(), f.value().size());
    out += "\r\n";
  }
  out += "\r\n";
  return out;
}

template <bool isRequest, class From, class To>
net::awaitable<relay_result> relay(From& from, beast::flat_buffer& buffer,
                                   bounded_parser<isRequest, bhttp::buffer_body>& p, To& to,
                                   bhttp::serializer<isRequest, bhttp::buffer_body>& sr, std::chrono::milliseconds idle,
                                   std::string_view prefix, const body_pace* pace) {
  std::uint64_t received = prefix.size();
  std::array<char, chunk_size> chunk;
  auto& body = p.get().body();
  // Reads as large as the chunk: a fresh buffer would otherwise read 512 bytes at a time
  // (Beast sizes a read by the buffer's free capacity).
  if (buffer.capacity() < chunk_size) buffer.reserve(chunk_size);
  // Trailers can travel only in a chunked message: the outgoing one is when its fields say so.
  bool const chunked_out = p.get().chunked();
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
      if (pace)
        from.expires_at(std::min(std::chrono::steady_clock::now() + idle, pace->deadline(received)));
      else
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
      received += got;
      if (got == 0 && !p.is_done()) continue;  // only framing was parsed
      body.data = got ? chunk.data() : nullptr;
      body.size = got;
      body.more = !p.is_done();
    } else {
      body.data = nullptr;
      body.size = 0;
      body.more = false;
    }
    if (!body.more && chunked_out && p.trailers().begin() != p.trailers().end()) {
      // Beast's serializer ends a chunked body with an empty last chunk; with trailers
      // the last chunk is written here instead.
      if (body.size > 0) {
        body.more = true;
        to.expires_after(idle);
        auto [ec, n] = co_await bhttp::async_write(to, sr, use_tuple);
        if (ec && ec != bhttp::error::need_buffer) co_return relay_result{{}, ec};
      }
      auto const last = last_chunk_with(p.trailers());
      to.expires_after(idle);
      auto [ec, n] = co_await net::async_write(to, net::buffer(last), use_tuple);
      co_return relay_result{{}, ec};
    }
    to.expires_after(idle);
    auto [ec, n] = co_await bhttp::async_write(to, sr, use_tuple);
    if (ec && ec != bhttp::error::need_buffer) co_return relay_result{{}, ec};
  }
  co_return relay_result{};
}

}  // namespace

net::awaitable<error_code> relay_interim(beast::tcp_stream& client, const bhttp::response_header<>& head,
                                         std::chrono::milliseconds idle) {
  bhttp::response<bhttp::empty_body> interim;
  interim.version(11);
  interim.result(head.result_int());  // by number: Beast 1.81's status enum has no 103
  for (auto const& f : head) interim.insert(f.name_string(), f.value());
  strip_hop_by_hop(interim.base());
  client.expires_after(idle);
  auto [ec, n] = co_await bhttp::async_write(client, interim, use_tuple);
  co_return ec;
}

net::awaitable<relay_result> relay_request_body(beast::tcp_stream& from, beast::flat_buffer& buffer, request_parser& p,
                                                upstream::connection& to,
                                                bhttp::request_serializer<bhttp::buffer_body>& sr,
                                                std::chrono::milliseconds idle, std::string_view prefix,
                                                const body_pace& pace) {
  return relay<true>(from, buffer, p, to, sr, idle, prefix, &pace);
}

net::awaitable<relay_result> relay_response_body(upstream::connection& from, beast::flat_buffer& buffer,
                                                 response_parser& p, beast::tcp_stream& to,
                                                 bhttp::response_serializer<bhttp::buffer_body>& sr,
                                                 std::chrono::milliseconds idle) {
  return relay<false>(from, buffer, p, to, sr, idle, {}, nullptr);
}

}  // namespace rebound::http
