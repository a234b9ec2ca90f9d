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

#include <boost/asio/async_result.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <memory>
#include <utility>

namespace rebound::upstream {

using tls_stream = beast::ssl_stream<beast::tcp_stream>;

class connection {
 public:
  using executor_type = beast::tcp_stream::executor_type;

  explicit connection(beast::tcp_stream plain) : plain_(std::make_unique<beast::tcp_stream>(std::move(plain))) {}
  explicit connection(std::unique_ptr<tls_stream> tls) : tls_(std::move(tls)) {}

  executor_type get_executor() { return tcp().get_executor(); }
  bool is_tls() const { return tls_ != nullptr; }

  /// The TCP layer: deadlines (`expires_at`, `expires_never`) and the socket.
  beast::tcp_stream& tcp() { return tls_ ? tls_->next_layer() : *plain_; }
  tcp::socket& socket() { return tcp().socket(); }
  void expires_at(std::chrono::steady_clock::time_point t) { tcp().expires_at(t); }
  void expires_after(std::chrono::steady_clock::duration d) { tcp().expires_after(d); }
  void expires_never() { tcp().expires_never(); }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return net::async_initiate<Token, void(error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          if (tls_) return tls_->async_read_some(b, std::move(handler));
          plain_->async_read_some(b, std::move(handler));
        },
        token, buffers);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return net::async_initiate<Token, void(error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          if (tls_) return tls_->async_write_some(b, std::move(handler));
          plain_->async_write_some(b, std::move(handler));
        },
        token, buffers);
  }

 private:
  // Held by pointer: tcp_stream cannot be move-assigned, and a pooled connection moves.
  std::unique_ptr<beast::tcp_stream> plain_;
  std::unique_ptr<tls_stream> tls_;
};

/// End of stream, on TCP or TLS (with or without the peer's close_notify).
bool ends_stream(const error_code& ec);

}  // namespace rebound::upstream
