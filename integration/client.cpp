#include "client.hpp"

#include "rebound_process.hpp"
#include "wire.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdexcept>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace itest {

namespace http = boost::beast::http;
namespace net = boost::asio;
using steady = std::chrono::steady_clock;

namespace {

// Writing to a socket the proxy closed must fail with EPIPE, not kill the test binary.
const bool sigpipe_ignored = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

// `head_fields`: how many fields the head had; Beast appends a chunked message's trailer
// fields after them, which go to `trailers`.
template <class Message>
Response to_response(const Message& m, bool chunked, std::size_t head_fields = static_cast<std::size_t>(-1)) {
  Response r;
  r.status = m.result_int();
  r.reason = std::string(m.reason());
  r.version = m.version();
  std::size_t i = 0;
  for (auto const& f : m)
    (i++ < head_fields ? r.headers : r.trailers).emplace_back(std::string(f.name_string()), std::string(f.value()));
  r.body = m.body();
  r.chunked = chunked;
  return r;
}

}  // namespace

// ---- RawConnection ----

RawConnection::RawConnection(std::uint16_t port) {
  (void)sigpipe_ignored;
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int e = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(e));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::optional<RawConnection> RawConnection::try_connect(std::uint16_t port) {
  try {
    return std::optional<RawConnection>(std::in_place, port);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

RawConnection::RawConnection(RawConnection&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), buf_(std::move(other.buf_)), eof_(other.eof_) {}

RawConnection::~RawConnection() {
  if (fd_ >= 0) ::close(fd_);
}

bool RawConnection::send(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::size_t RawConnection::send_until_stalled(std::string_view bytes, std::chrono::milliseconds stall) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;  // the peer is gone
    pollfd p{fd_, POLLOUT, 0};
    int r = ::poll(&p, 1, static_cast<int>(stall.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || (p.revents & (POLLERR | POLLHUP))) break;  // stalled for `stall`, or gone
  }
  return sent;
}

bool RawConnection::wait_acknowledged(std::chrono::milliseconds timeout) {
  auto deadline = steady::now() + timeout;
  for (;;) {
    int queued = 0;
    if (::ioctl(fd_, SIOCOUTQ, &queued) != 0) return false;
    if (queued == 0) return true;
    if (steady::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void RawConnection::shutdown_write() { ::shutdown(fd_, SHUT_WR); }

bool RawConnection::fill(steady::time_point deadline) {
  if (eof_) return false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    char data[64 * 1024];
    ssize_t n = ::recv(fd_, data, sizeof data, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(data, static_cast<std::size_t>(n));
    return true;
  }
}

std::optional<Response> RawConnection::read_response(std::chrono::milliseconds timeout, bool head_request) {
  auto deadline = steady::now() + timeout;
  http::response_parser<http::string_body> p;
  p.body_limit(boost::none);
  p.header_limit(1024 * 1024);
  // Not eager until the head is parsed, so the head's fields can be counted before any
  // trailer field is appended to them.
  if (head_request) p.skip(true);
  last_error_.clear();
  auto head_fields = static_cast<std::size_t>(-1);
  for (;;) {
    if (!buf_.empty()) {
      boost::beast::error_code ec;
      auto n = p.put(net::const_buffer(buf_.data(), buf_.size()), ec);
      if (ec && ec != http::error::need_more) {
        last_error_ = "unparsable response (" + ec.message() + "): \"" + buf_.substr(0, 300) + "\"";
        return std::nullopt;
      }
      buf_.erase(0, n);
      if (p.is_header_done() && head_fields == static_cast<std::size_t>(-1)) {
        head_fields = static_cast<std::size_t>(std::distance(p.get().begin(), p.get().end()));
        p.eager(true);
      }
      if (p.is_done()) break;
      if (n > 0) continue;
    }
    if (eof_) {
      // Without a byte of it, Beast's put_eof would complete an empty "200" message.
      if (!p.got_some()) {
        last_error_ = "connection closed before any response byte";
        return std::nullopt;
      }
      boost::beast::error_code ec;
      p.put_eof(ec);
      if (!ec && p.is_done()) break;
      last_error_ = "connection closed before a complete response; unparsed: \"" + buf_.substr(0, 300) + "\"";
      return std::nullopt;
    }
    if (!fill(deadline) && !eof_) {
      last_error_ = "timeout after " + std::to_string(timeout.count()) + " ms";
      if (p.is_header_done()) {
        last_error_ += "; head received: status " + std::to_string(p.get().result_int()) + " \"" +
                       std::string(p.get().reason()) + "\", body so far: \"" + p.get().body().substr(0, 300) + "\"";
      }
      last_error_ += "; unparsed: \"" + buf_.substr(0, 300) + "\"";
      return std::nullopt;
    }
  }
  return to_response(p.get(), p.chunked(), head_fields);
}

std::optional<Response> RawConnection::read_head(std::chrono::milliseconds timeout) {
  auto deadline = steady::now() + timeout;
  std::size_t end;
  while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
    if (!fill(deadline)) return std::nullopt;
  }
  std::string head = buf_.substr(0, end + 4);
  buf_.erase(0, end + 4);
  http::response_parser<http::empty_body> p;
  p.skip(true);  // a head only, whatever the framing says
  boost::beast::error_code ec;
  p.put(net::const_buffer(head.data(), head.size()), ec);
  if (ec || !p.is_header_done()) return std::nullopt;
  Response r;
  auto const& m = p.get();
  r.status = m.result_int();
  r.reason = std::string(m.reason());
  r.version = m.version();
  for (auto const& f : m) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  return r;
}

std::string RawConnection::read_until_eof(std::chrono::milliseconds timeout, bool* complete) {
  auto deadline = steady::now() + timeout;
  while (!eof_ && fill(deadline)) {
  }
  if (complete) *complete = eof_;
  return std::exchange(buf_, {});
}

std::string RawConnection::read_exactly(std::size_t n, std::chrono::milliseconds timeout) {
  auto deadline = steady::now() + timeout;
  while (buf_.size() < n && fill(deadline)) {
  }
  std::string out = buf_.substr(0, std::min(n, buf_.size()));
  buf_.erase(0, out.size());
  return out;
}

bool RawConnection::wait_closed(std::chrono::milliseconds timeout) {
  auto deadline = steady::now() + timeout;
  for (;;) {
    buf_.clear();
    if (eof_) return true;
    if (!fill(deadline) && !eof_) return false;
  }
}

bool RawConnection::read_until_contains(std::string_view needle, std::chrono::milliseconds timeout) {
  auto deadline = steady::now() + timeout;
  while (buf_.find(needle) == std::string::npos) {
    if (!fill(deadline)) return false;
  }
  return true;
}

bool RawConnection::quiet_for(std::chrono::milliseconds d) {
  std::size_t before = buf_.size();
  fill(steady::now() + d);
  return buf_.size() == before && !eof_;
}

namespace {
std::string& exchange_error() {
  thread_local std::string error;
  return error;
}
}  // namespace

std::optional<Response> raw_exchange(std::uint16_t port, std::string_view request_bytes,
                                     std::chrono::milliseconds timeout) {
  auto& error = exchange_error();
  error.clear();
  auto c = RawConnection::try_connect(port);
  if (!c) {
    error = "cannot connect to 127.0.0.1:" + std::to_string(port);
    return std::nullopt;
  }
  if (!c->send(request_bytes)) {
    error = "the request could not be sent";
    return std::nullopt;
  }
  bool head = request_bytes.substr(0, 5) == "HEAD ";
  for (;;) {
    auto r = c->read_response(timeout, head);
    if (!r) error = c->last_error();
    if (!r || r->status >= 200 || r->status == 101) return r;
  }
}

const std::string& last_exchange_error() { return exchange_error(); }

// ---- HttpClient ----

struct HttpClient::Impl {
  net::io_context ioc;
  boost::beast::tcp_stream stream{ioc};
  boost::beast::flat_buffer buffer;
  std::chrono::milliseconds timeout;
  bool closed = false;

  void run(const char* what, boost::beast::error_code& ec) {
    ioc.restart();
    ioc.run();
    if (ec) throw std::runtime_error(std::string("HttpClient ") + what + ": " + ec.message());
  }
};

HttpClient::HttpClient(std::uint16_t port, std::chrono::milliseconds timeout) : impl_(std::make_unique<Impl>()) {
  (void)sigpipe_ignored;
  impl_->timeout = timeout;
  impl_->stream.expires_after(timeout);
  boost::beast::error_code ec;
  impl_->stream.async_connect(net::ip::tcp::endpoint(net::ip::address_v4::loopback(), port),
                              [&ec](boost::beast::error_code e) { ec = e; });
  impl_->run("connect", ec);
  impl_->stream.socket().set_option(net::ip::tcp::no_delay(true));
}

HttpClient::~HttpClient() = default;

bool HttpClient::closed() const { return impl_->closed; }

Response HttpClient::request(const std::string& method, const std::string& target, const Fields& headers,
                             const std::string& body) {
  if (impl_->closed) throw std::runtime_error("HttpClient: connection closed by server");
  http::request<http::string_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  bool has_host = false;
  for (auto const& [k, v] : headers) {
    req.insert(k, v);
    if (iequals(k, "host")) has_host = true;
  }
  if (!has_host) {
    // The authority of an absolute target, like a real client.
    auto pos = target.find("://");
    std::string host = "127.0.0.1";
    if (pos != std::string::npos) {
      auto start = pos + 3;
      host = target.substr(start, target.find('/', start) - start);
    }
    req.set(http::field::host, host);
  }
  req.body() = body;
  if (!body.empty() || method == "POST" || method == "PUT") req.prepare_payload();

  boost::beast::error_code ec;
  impl_->stream.expires_after(impl_->timeout);
  http::async_write(impl_->stream, req, [&ec](boost::beast::error_code e, std::size_t) { ec = e; });
  impl_->run("write", ec);

  std::optional<http::response_parser<http::string_body>> p;
  for (;;) {  // interim 1xx responses are skipped
    p.emplace();
    p->body_limit(boost::none);
    if (method == "HEAD") p->skip(true);
    impl_->stream.expires_after(impl_->timeout);
    http::async_read(impl_->stream, impl_->buffer, *p, [&ec](boost::beast::error_code e, std::size_t) { ec = e; });
    impl_->run("read", ec);
    if (p->get().result_int() >= 200) break;
  }
  if (!p->get().keep_alive()) impl_->closed = true;
  return to_response(p->get(), p->chunked());
}

// ---- curl ----

CurlResult curl(std::uint16_t proxy_port, const std::string& url, const std::vector<std::string>& extra_args) {
  std::string dir = make_temp_dir();
  std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "--max-time",  "20", "-o",
                                   dir + "/body",   "-w",  "%{http_code}"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  argv.push_back(url);
  std::string proxy = "http://127.0.0.1:" + std::to_string(proxy_port);
  auto r = run_process(argv,
                       {"http_proxy=" + proxy, "HTTP_PROXY", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY",
                        "https_proxy", "HTTPS_PROXY"},
                       std::chrono::seconds(30));
  CurlResult out;
  out.exit_code = r.exit_code;
  out.err = r.err;
  try {
    out.status = static_cast<unsigned>(std::stoul(r.out));
  } catch (...) {
    out.status = 0;
  }
  out.body = read_file(dir + "/body");
  remove_tree(dir);
  return out;
}

}  // namespace itest
