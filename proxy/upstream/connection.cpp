#include "proxy/upstream/connection.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

namespace rebound::upstream {

connection::connection(beast::tcp_stream plain) : plain_(std::make_unique<beast::tcp_stream>(std::move(plain))) {}
connection::connection(std::unique_ptr<tls_stream> tls) : tls_(std::move(tls)) {}
connection::connection(connection&&) noexcept = default;
connection& connection::operator=(connection&&) noexcept = default;
connection::~connection() = default;

beast::tcp_stream& connection::tls_next_layer() { return tls_->next_layer(); }

// Completions run on the connection's own executor: Beast 1.81's tcp_stream posts with
// `blocking.never`, which an any_completion_handler's type-erased executor cannot take. Every
// caller runs on its worker's io_context, which is this executor, so nothing changes hands.
void connection::start_read(net::mutable_buffer b, io_handler h) {
  auto bound = net::bind_executor(get_executor(), std::move(h));
  if (tls_) return tls_->async_read_some(b, std::move(bound));
  plain_->async_read_some(b, std::move(bound));
}

void connection::start_write(const std::array<net::const_buffer, max_gather>& b, io_handler h) {
  auto bound = net::bind_executor(get_executor(), std::move(h));
  if (tls_) return tls_->async_write_some(b, std::move(bound));
  plain_->async_write_some(b, std::move(bound));
}

bool ends_stream(const error_code& ec) { return ec == net::error::eof || ec == net::ssl::error::stream_truncated; }

}  // namespace rebound::upstream
