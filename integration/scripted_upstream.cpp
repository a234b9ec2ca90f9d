#include "scripted_upstream.hpp"

#include "wire.hpp"

#include <boost/beast/http.hpp>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace itest {

namespace http = boost::beast::http;

std::optional<std::string> find_field(const Fields& fields, std::string_view name) {
  for (auto const& [k, v] : fields)
    if (iequals(k, name)) return v;
  return std::nullopt;
}

std::size_t count_fields(const Fields& fields, std::string_view name) {
  std::size_t n = 0;
  for (auto const& f : fields)
    if (iequals(f.first, name)) ++n;
  return n;
}

// ---- Gate ----

void Gate::open() {
  std::lock_guard lock(mutex_);
  open_ = true;
  cv_.notify_all();
}

bool Gate::is_open() const {
  std::lock_guard lock(mutex_);
  return open_;
}

void Gate::notify() {
  std::lock_guard lock(mutex_);
  cv_.notify_all();
}

bool Gate::wait(const std::function<bool()>& abandon) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return open_ || abandon(); });
  return open_;
}

// ---- Conn ----

std::string Conn::read_some() {
  char data[64 * 1024];
  if (ssl_) {
    int n = SSL_read(static_cast<SSL*>(ssl_), data, sizeof data);
    return n > 0 ? std::string(data, static_cast<std::size_t>(n)) : std::string();
  }
  for (;;) {
    ssize_t n = ::recv(fd_, data, sizeof data, 0);
    if (n > 0) return std::string(data, static_cast<std::size_t>(n));
    if (n < 0 && errno == EINTR) continue;
    return {};
  }
}

bool Conn::write_all(std::string_view bytes) {
  if (ssl_) {
    while (!bytes.empty()) {
      int n = SSL_write(static_cast<SSL*>(ssl_), bytes.data(), static_cast<int>(bytes.size()));
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
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

void Conn::shutdown_write() {
  if (ssl_) SSL_shutdown(static_cast<SSL*>(ssl_));  // close_notify first, as a TLS server would
  ::shutdown(fd_, SHUT_WR);
}

void Conn::reset() {
  linger l{1, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  // The server closes the descriptor when the handler returns: with linger 0 that sends RST.
}

// ---- TcpServer ----

TcpServer::TcpServer() = default;

TcpServer::TcpServer(Handler handler) { start(std::move(handler)); }

TcpServer::~TcpServer() { stop(); }

void TcpServer::start(Handler handler, std::uint16_t port, const std::string& address) {
  handler_ = std::move(handler);
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error("upstream: socket() failed");
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    ::close(listen_fd_);
    throw std::runtime_error("upstream: not an IPv4 address: " + address);
  }
  addr.sin_port = htons(port);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd_, 1024) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error("upstream: bind/listen failed" +
                             (port ? " on port " + std::to_string(port) : std::string()));
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  accept_thread_ = std::thread([this] { accept_loop(); });
}

void TcpServer::accept_loop() {
  while (!stopping_) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      return;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ++connections_;
    std::lock_guard lock(mutex_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    open_fds_.insert(fd);
    workers_.emplace_back([this, fd, tls = tls_ctx_] {
      SSL* ssl = tls ? static_cast<SSL*>(accept_tls(tls.get(), fd)) : nullptr;
      if (!tls || ssl) {
        Conn conn(fd, ssl);
        try {
          handler_(conn, *this);
        } catch (...) {
        }
      }
      if (ssl) SSL_free(ssl);
      std::lock_guard lock(mutex_);
      open_fds_.erase(fd);
      ::close(fd);
      ++closed_;
    });
  }
}

void TcpServer::use_tls(const std::string& cert_file, const std::string& key_file, const std::string& client_ca) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    SSL_CTX_free(ctx);
    throw std::runtime_error("upstream: cannot load " + cert_file);
  }
  static const unsigned char id[] = "itest";
  SSL_CTX_set_session_id_context(ctx, id, sizeof id - 1);  // resumption with client certificates needs it
  if (!client_ca.empty()) {
    SSL_CTX_load_verify_locations(ctx, client_ca.c_str(), nullptr);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  std::lock_guard lock(mutex_);
  tls_ctx_ = std::shared_ptr<void>(ctx, [](void* c) { SSL_CTX_free(static_cast<SSL_CTX*>(c)); });
}

void* TcpServer::accept_tls(void* ctx, int fd) {
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(ctx));
  SSL_set_fd(ssl, fd);
  if (SSL_accept(ssl) != 1) {
    ++tls_failed_;
    SSL_free(ssl);
    return nullptr;
  }
  ++tls_handshakes_;
  if (SSL_session_reused(ssl)) ++tls_resumed_;
  std::lock_guard lock(mutex_);
  auto const* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  last_sni_ = sni ? sni : "";
  last_client_cn_.clear();
  if (X509* peer = SSL_get0_peer_certificate(ssl)) {
    char cn[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof cn);
    last_client_cn_ = cn;
  }
  return ssl;
}

std::string TcpServer::last_sni() const {
  std::lock_guard lock(mutex_);
  return last_sni_;
}

std::string TcpServer::last_client_cn() const {
  std::lock_guard lock(mutex_);
  return last_client_cn_;
}

bool TcpServer::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock lock(mutex_);
  return stop_cv_.wait_for(lock, d, [this] { return stopping_.load(); });
}

void TcpServer::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || listen_fd_ < 0) {
      stopping_ = true;
      return;
    }
    stopping_ = true;
    stop_cv_.notify_all();
  }
  on_stop();
  ::shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  ::close(listen_fd_);
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mutex_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    workers.swap(workers_);
  }
  for (auto& t : workers) t.join();
}

// ---- ScriptedUpstream ----

namespace {

// Feeds bytes from the connection into the parser until done(parser); false on EOF or error.
template <class Parser, class Done>
bool feed(Conn& conn, std::string& buf, Parser& p, Done done) {
  for (;;) {
    if (done(p)) return true;
    if (!buf.empty()) {
      boost::beast::error_code ec;
      auto n = p.put(boost::asio::const_buffer(buf.data(), buf.size()), ec);
      buf.erase(0, n);
      if (ec == http::error::need_more) ec = {};
      if (ec) return false;
      if (n > 0) continue;
    }
    std::string more = conn.read_some();
    if (more.empty()) return false;
    buf += more;
  }
}

std::string build_response(const Script& s, const http::request<http::string_body>& req, bool close) {
  std::string target(req.target());
  std::string body = s.echo_body ? req.body() : s.body.value_or("ok " + target);
  bool head = req.method() == http::verb::head;
  bool bodyless_status = s.status / 100 == 1 || s.status == 204 || s.status == 304;
  std::string out = "HTTP/1.1 " + std::to_string(s.status) + " " +
                    std::string(http::obsolete_reason(static_cast<http::status>(s.status))) + "\r\n";
  for (auto const& [k, v] : s.headers) out += k + ": " + v + "\r\n";
  if (!s.chunks.empty()) {
    out += "Transfer-Encoding: chunked\r\n";
  } else if (!bodyless_status) {
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  if (close) out += "Connection: close\r\n";
  out += "\r\n";
  if (head || bodyless_status) return out;
  if (!s.chunks.empty()) {
    char hex[32];
    for (auto const& c : s.chunks) {
      if (c.empty()) continue;
      std::snprintf(hex, sizeof hex, "%zx\r\n", c.size());
      out += hex;
      out += c;
      out += "\r\n";
    }
    out += "0\r\n\r\n";
  } else {
    out += body;
  }
  return out;
}

void drain_until_eof(Conn& conn) {
  while (!conn.read_some().empty()) {
  }
}

}  // namespace

ScriptedUpstream::ScriptedUpstream() {
  start([this](Conn& conn, TcpServer&) { serve(conn, next_connection_++); });
}

ScriptedUpstream::ScriptedUpstream(std::uint16_t port) {
  start([this](Conn& conn, TcpServer&) { serve(conn, next_connection_++); }, port);
}

ScriptedUpstream::ScriptedUpstream(const std::string& address, std::uint16_t port) {
  start([this](Conn& conn, TcpServer&) { serve(conn, next_connection_++); }, port, address);
}

ScriptedUpstream::~ScriptedUpstream() { stop(); }

void ScriptedUpstream::on_stop() {
  std::lock_guard lock(mutex_);
  for (auto const& [path, s] : scripts_) {
    if (s.gate) s.gate->notify();
    if (s.mid_body_gate) s.mid_body_gate->notify();
  }
  for (auto const& [path, seq] : sequences_)
    for (auto const& s : seq) {
      if (s.gate) s.gate->notify();
      if (s.mid_body_gate) s.mid_body_gate->notify();
    }
}

void ScriptedUpstream::on(const std::string& path, Script script) {
  std::lock_guard lock(mutex_);
  sequences_.erase(path);
  scripts_[path] = std::move(script);
}

void ScriptedUpstream::on_sequence(const std::string& path, std::vector<Script> scripts) {
  std::lock_guard lock(mutex_);
  scripts_.erase(path);
  sequence_pos_.erase(path);
  if (scripts.empty()) {
    sequences_.erase(path);
  } else {
    sequences_[path] = std::move(scripts);
  }
}

Script ScriptedUpstream::script_for(const std::string& path) const {
  std::lock_guard lock(mutex_);
  if (auto seq = sequences_.find(path); seq != sequences_.end()) {
    std::size_t& pos = sequence_pos_[path];
    std::size_t i = pos < seq->second.size() ? pos : seq->second.size() - 1;
    ++pos;
    return seq->second[i];
  }
  auto it = scripts_.find(path);
  return it == scripts_.end() ? Script{} : it->second;
}

std::vector<ReceivedRequest> ScriptedUpstream::requests() const {
  std::lock_guard lock(mutex_);
  return received_;
}

std::size_t ScriptedUpstream::request_count() const {
  std::lock_guard lock(mutex_);
  return received_.size();
}

std::size_t ScriptedUpstream::request_count(const std::string& path) const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (auto const& r : received_)
    if (r.path() == path) ++n;
  return n;
}

bool ScriptedUpstream::wait_for_requests(std::size_t n, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return cv_.wait_for(lock, timeout, [&] { return received_.size() >= n; });
}

void ScriptedUpstream::serve(Conn& conn, std::size_t connection_index) {
  std::string buf;
  auto hold = [this](const Script& s) {
    if (s.delay.count() > 0 && sleep_for(s.delay)) return false;
    if (s.gate && !s.gate->wait([this] { return stopping(); })) return false;
    return !stopping();
  };
  for (;;) {
    http::request_parser<http::string_body> p;
    p.header_limit(1024 * 1024);
    p.body_limit(std::uint64_t{256} * 1024 * 1024);
    if (!feed(conn, buf, p, [](auto& q) { return q.is_header_done(); })) return;

    auto const& m = p.get();
    ReceivedRequest r;
    r.method = std::string(m.method_string());
    r.target = std::string(m.target());
    r.version = m.version();
    for (auto const& f : m) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    r.chunked = p.chunked();
    r.connection = connection_index;
    r.at = std::chrono::steady_clock::now();
    Script s = script_for(r.path());
    std::size_t index;
    {
      std::lock_guard lock(mutex_);
      index = received_.size();
      received_.push_back(std::move(r));
    }
    cv_.notify_all();

    if (iequals(m[http::field::expect], "100-continue")) {
      if (s.on_expect == OnExpect::send_100) {
        if (!conn.write_all("HTTP/1.1 100 Continue\r\n\r\n")) return;
      } else if (s.on_expect == OnExpect::final_early) {
        if (!hold(s)) return;
        conn.write_all(build_response(s, p.get(), true));
        conn.shutdown_write();
        drain_until_eof(conn);
        return;
      }
    }

    if (!feed(conn, buf, p, [](auto& q) { return q.is_done(); })) return;
    {
      std::lock_guard lock(mutex_);
      received_[index].body = p.get().body();
      // Beast appends trailer fields after the head's: whatever lies past them is a trailer.
      std::size_t i = 0;
      auto const head_fields = received_[index].headers.size();
      for (auto const& f : p.get())
        if (i++ >= head_fields)
          received_[index].trailers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      received_[index].complete = true;
    }
    cv_.notify_all();

    if (!hold(s)) return;
    if (s.reset) {
      conn.reset();
      return;
    }
    if (!s.raw_response.empty()) {
      conn.write_all(s.raw_response);
      conn.shutdown_write();
      drain_until_eof(conn);
      return;
    }
    if (!s.interim.empty() && !conn.write_all(s.interim)) return;
    bool close = s.close_after || !p.keep_alive();
    std::string response = build_response(s, p.get(), close);
    if (s.mid_body_gate && s.chunks.size() > 1 && p.get().method() != http::verb::head) {
      // Everything up to the end of the first chunk, then wait.
      auto first_end = response.find("\r\n\r\n") + 4;
      first_end = response.find("\r\n", first_end) + 2 + s.chunks.front().size() + 2;
      if (!conn.write_all(std::string_view(response).substr(0, first_end))) return;
      if (!s.mid_body_gate->wait([this] { return stopping(); })) return;
      response.erase(0, first_end);
    }
    if (!conn.write_all(response)) return;
    if (s.close_silently) return;
    if (close) {
      conn.shutdown_write();
      drain_until_eof(conn);
      return;
    }
  }
}

// ---- raw handlers ----

TcpServer::Handler echo_handler() {
  return [](Conn& conn, TcpServer&) {
    for (;;) {
      std::string got = conn.read_some();
      if (got.empty()) break;
      if (!conn.write_all(got)) return;
    }
    conn.shutdown_write();
  };
}

TcpServer::Handler collect_then_reply_handler() {
  return [](Conn& conn, TcpServer&) {
    std::string all;
    for (;;) {
      std::string got = conn.read_some();
      if (got.empty()) break;
      all += got;
    }
    conn.write_all("got:" + all);
    conn.shutdown_write();
  };
}

}  // namespace itest
