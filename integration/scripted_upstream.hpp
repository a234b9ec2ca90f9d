// Test upstreams on 127.0.0.1, each on its own threads (one accept thread, one thread per
// connection, blocking I/O). `TcpServer` runs any per-connection handler (the CONNECT tests use
// it for raw byte servers); `ScriptedUpstream` is an HTTP/1.1 keep-alive server whose answers
// are programmed per path and which records every request it receives.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace itest {

using Fields = std::vector<std::pair<std::string, std::string>>;

// Case-insensitive lookups over a field list.
std::optional<std::string> find_field(const Fields& fields, std::string_view name);
std::size_t count_fields(const Fields& fields, std::string_view name);

// A latch a test opens to let a held response go (deterministic "slow upstream").
class Gate {
 public:
  void open();
  bool is_open() const;
  // Waits until opened or `abandon` returns true (checked on every notification); true if opened.
  bool wait(const std::function<bool()>& abandon);
  void notify();  // wakes waiters so they re-check `abandon`

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Connected socket handed to a TcpServer handler: blocking reads/writes on a file descriptor.
class Conn {
 public:
  explicit Conn(int fd, void* ssl = nullptr) : fd_(fd), ssl_(ssl) {}
  int fd() const { return fd_; }
  // Reads what is available (blocking); empty on EOF or error.
  std::string read_some();
  bool write_all(std::string_view bytes);
  void shutdown_write();
  void reset();  // SO_LINGER 0 then close: the peer sees RST

 private:
  int fd_;
  void* ssl_;  // SSL* when the server speaks TLS
};

class TcpServer {
 public:
  using Handler = std::function<void(Conn&, TcpServer&)>;
  explicit TcpServer(Handler handler);
  virtual ~TcpServer();
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;

  std::uint16_t port() const { return port_; }
  std::string authority() const { return "127.0.0.1:" + std::to_string(port_); }
  std::size_t connections() const { return connections_.load(); }
  std::size_t closed_connections() const { return closed_.load(); }
  bool stopping() const { return stopping_.load(); }

  // Serve TLS with this certificate chain and key from now on; with `client_ca`, a client
  // certificate issued by it is required (mTLS). Call before clients connect.
  void use_tls(const std::string& cert_file, const std::string& key_file, const std::string& client_ca = {});
  std::size_t tls_handshakes() const { return tls_handshakes_.load(); }  // completed
  std::size_t tls_resumed() const { return tls_resumed_.load(); }        // of those, resumed sessions
  std::size_t tls_failed_handshakes() const { return tls_failed_.load(); }
  std::string last_sni() const;        // the server name the last client sent
  std::string last_client_cn() const;  // CN of the last client certificate, if any
  // Sleeps up to `d`; returns early (true) when the server stops.
  bool sleep_for(std::chrono::milliseconds d);
  void stop();

 protected:
  TcpServer();  // for subclasses that pass the handler later through start()
  // Listens on address:port (0: any free port; another loopback address such as 127.0.0.2
  // stands for another host of a name); throws if it cannot.
  void start(Handler handler, std::uint16_t port = 0, const std::string& address = "127.0.0.1");
  virtual void on_stop() {}

 private:
  void accept_loop();
  void* accept_tls(void* ctx, int fd);  // SSL* from SSL_CTX*, or nullptr when the handshake fails

  Handler handler_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> connections_{0};
  std::atomic<std::size_t> closed_{0};
  std::shared_ptr<void> tls_ctx_;  // SSL_CTX
  std::atomic<std::size_t> tls_handshakes_{0}, tls_resumed_{0}, tls_failed_{0};
  std::string last_sni_, last_client_cn_;  // under mutex_
  std::thread accept_thread_;
  mutable std::mutex mutex_;
  std::condition_variable stop_cv_;
  std::set<int> open_fds_;
  std::vector<std::thread> workers_;
};

enum class OnExpect {
  send_100,     // answer "100 Continue", then read the body
  silent,       // say nothing; read the body when it comes
  final_early,  // answer the final response without reading the body, then close
};

struct Script {
  unsigned status = 200;
  Fields headers;                   // written verbatim (hop-by-hop fields included)
  std::optional<std::string> body;  // default: "ok " + target
  bool echo_body = false;           // answer with the request body
  std::vector<std::string> chunks;  // non-empty: chunked response made of these chunks
  std::chrono::milliseconds delay{0};
  std::shared_ptr<Gate> gate;           // held until opened
  std::shared_ptr<Gate> mid_body_gate;  // chunked responses: the first chunk is sent, the rest held
  bool reset = false;                   // read the request, then RST instead of answering
  OnExpect on_expect = OnExpect::send_100;
  bool close_after = false;     // Connection: close, then close
  bool close_silently = false;  // keep-alive response, then close anyway (an idle-closed pool entry)
  std::string interim;          // written before the final response (e.g. a 103)
  std::string raw_response;     // non-empty: these bytes verbatim, then close
};

struct ReceivedRequest {
  std::string method;
  std::string target;
  unsigned version = 11;
  Fields headers;
  Fields trailers;  // the trailer section of a chunked body
  std::string body;
  bool chunked = false;   // arrived with Transfer-Encoding: chunked
  bool complete = false;  // body fully read
  std::size_t connection = 0;
  std::chrono::steady_clock::time_point at{};  // when the head was parsed

  std::string path() const { return target.substr(0, target.find('?')); }
  std::optional<std::string> header(std::string_view name) const { return find_field(headers, name); }
  std::size_t header_count(std::string_view name) const { return count_fields(headers, name); }
};

class ScriptedUpstream : public TcpServer {
 public:
  ScriptedUpstream();
  // On a given port, e.g. the one a stopped upstream listened on (an upstream restart).
  explicit ScriptedUpstream(std::uint16_t port);
  // On another loopback address (127.0.0.2...): one of a DNS name's hosts (port 0: any free).
  ScriptedUpstream(const std::string& address, std::uint16_t port);
  ~ScriptedUpstream() override;

  void on(const std::string& path, Script script);  // path without query
  // Scripts used in order for successive requests to `path`; the last one repeats.
  void on_sequence(const std::string& path, std::vector<Script> scripts);
  std::vector<ReceivedRequest> requests() const;
  std::size_t request_count() const;
  std::size_t request_count(const std::string& path) const;
  // Polls (bounded) until at least n requests arrived (heads parsed); true if they did.
  bool wait_for_requests(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 protected:
  void on_stop() override;

 private:
  void serve(Conn& conn, std::size_t connection_index);
  Script script_for(const std::string& path) const;

  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  std::map<std::string, Script> scripts_;
  std::map<std::string, std::vector<Script>> sequences_;
  mutable std::map<std::string, std::size_t> sequence_pos_;
  std::vector<ReceivedRequest> received_;
  std::atomic<std::size_t> next_connection_{0};
};

// Raw byte servers for tunnel tests.
TcpServer::Handler echo_handler();                // echoes until EOF, then closes
TcpServer::Handler collect_then_reply_handler();  // reads to EOF, writes "got:<bytes>", closes

}  // namespace itest
