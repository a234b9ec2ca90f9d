#pragma once
/** One upstream connection: plain TCP, or TLS over TCP when the dependency's origin is
    https:// (rebound is then the TLS client, SPEC section 5).

    A single type for both, so the pool, the attempt and the relays are written once. It is
    an AsyncReadStream and AsyncWriteStream: Beast's HTTP algorithms run on it directly, and
    each read or write goes to whichever stream this connection holds. Timeouts live on the
    TCP layer in both cases (`tcp()`), as Beast's tcp_stream does them.

    A TLS peer that closes without close_notify makes a read fail with
    `ssl::error::stream_truncated`; `ends_stream` treats that like a TCP end of stream, which
    is safe for HTTP because framing tells a complete message from a cut one. */
#include "proxy/net.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <utility>

namespace boost::beast {
template <class NextLayer>
class ssl_stream;
}

namespace rebound::upstream {

using tls_stream = beast::ssl_stream<beast::tcp_stream>;

class connection {
 public:
  using executor_type = beast::tcp_stream::executor_type;
  /** A read's or write's completion, type-erased (Asio 1.81's any_completion_handler): the
      TCP and TLS operations are compiled once, in connection.cpp, instead of once for every
      Beast composed operation that reads or writes a connection (relay.cpp took ~47 s of CPU
      to compile before). The price is one small allocation per read or write, taken from
      Asio's per-thread recycling cache rather than malloc. */
  using io_handler = net::any_completion_handler<void(error_code, std::size_t)>;
  /// A write takes at most this many buffers of a sequence at once; write_some may be partial.
  static constexpr std::size_t max_gather = 16;

  explicit connection(beast::tcp_stream plain);
  explicit connection(std::unique_ptr<tls_stream> tls);
  connection(connection&&) noexcept;
  connection& operator=(connection&&) noexcept;
  ~connection();

  executor_type get_executor() { return tcp().get_executor(); }
  bool is_tls() const { return tls_ != nullptr; }
  /// The address connected to (of a name's several, the one Happy Eyeballs chose): a retry
  /// prefers another (attempt.hpp's `destination::avoid`).
  const net::ip::address& peer() const { return peer_; }
  void set_peer(const net::ip::address& a) { peer_ = a; }

  /// The TCP layer: deadlines (`expires_at`, `expires_never`) and the socket.
  beast::tcp_stream& tcp() { return tls_ ? tls_next_layer() : *plain_; }
  tcp_socket& socket() { return tcp().socket(); }
  void expires_at(std::chrono::steady_clock::time_point t) { tcp().expires_at(t); }
  void expires_after(std::chrono::steady_clock::duration d) { tcp().expires_after(d); }
  void expires_never() { tcp().expires_never(); }
  /** Passes on the end of what is sent (a tunnel's half-close). Over TCP that is shutting
      the write side. Over TLS nothing is done: a close_notify cannot be sent without
      waiting for the peer's in Asio, and a TCP shutdown under TLS would cut the session; the
      tunnel ends when the upstream closes or goes idle. */
  void shutdown_send() {
    error_code ignored;
    if (!tls_) socket().shutdown(tcp_socket::shutdown_send, ignored);
  }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return net::async_initiate<Token, void(error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          // read_some may fill less than offered: the first non-empty buffer is enough.
          net::mutable_buffer first;
          for (auto it = net::buffer_sequence_begin(b); it != net::buffer_sequence_end(b); ++it)
            if (net::mutable_buffer m(*it); m.size() > 0) {
              first = m;
              break;
            }
          start_read(first, io_handler(net::bind_allocator(net::recycling_allocator<void>(), std::move(handler))));
        },
        token, buffers);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return net::async_initiate<Token, void(error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          std::array<net::const_buffer, max_gather> gathered{};
          std::size_t n = 0;
          for (auto it = net::buffer_sequence_begin(b); it != net::buffer_sequence_end(b) && n < max_gather; ++it)
            if (net::const_buffer c(*it); c.size() > 0) gathered[n++] = c;
          start_write(gathered, io_handler(net::bind_allocator(net::recycling_allocator<void>(), std::move(handler))));
        },
        token, buffers);
  }

 private:
  beast::tcp_stream& tls_next_layer();
  void start_read(net::mutable_buffer b, io_handler h);
  void start_write(const std::array<net::const_buffer, max_gather>& b, io_handler h);

  // Held by pointer: tcp_stream cannot be move-assigned, and a pooled connection moves.
  std::unique_ptr<beast::tcp_stream> plain_;
  std::unique_ptr<tls_stream> tls_;
  net::ip::address peer_;
};

/// End of stream, on TCP or TLS (with or without the peer's close_notify).
bool ends_stream(const error_code& ec);

}  // namespace rebound::upstream
