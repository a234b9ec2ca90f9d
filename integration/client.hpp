// Clients for the tests: a raw TCP connection (exact bytes out, parsed responses or raw bytes
// in, every read bounded by a timeout), a Beast keep-alive client, and the real curl.
#pragma once

#include "scripted_upstream.hpp"  // Fields, find_field

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace itest {

using namespace std::chrono_literals;

struct Response {
  unsigned status = 0;
  std::string reason;
  unsigned version = 11;
  Fields headers;
  Fields trailers;  // the trailer section of a chunked response (RawConnection only)
  std::string body;
  bool chunked = false;  // arrived with Transfer-Encoding: chunked

  std::optional<std::string> header(std::string_view name) const { return find_field(headers, name); }
  std::size_t header_count(std::string_view name) const { return count_fields(headers, name); }
  bool has(std::string_view name) const { return header_count(name) > 0; }
};

class RawConnection {
 public:
  explicit RawConnection(std::uint16_t port);  // connects to 127.0.0.1:port; throws on failure
  static std::optional<RawConnection> try_connect(std::uint16_t port);
  ~RawConnection();
  RawConnection(RawConnection&& other) noexcept;
  RawConnection& operator=(RawConnection&&) = delete;
  RawConnection(const RawConnection&) = delete;

  bool send(std::string_view bytes);  // false if the peer is gone
  // Sends as much of `bytes` as the peer takes, giving up once it took nothing for `stall`
  // (its receive window and this socket's send buffer are full) or it is gone; returns the
  // number of bytes sent.
  std::size_t send_until_stalled(std::string_view bytes, std::chrono::milliseconds stall);
  // Waits until the peer's kernel has acknowledged every byte sent so far (this socket's send
  // queue is empty, SIOCOUTQ): the bytes sit in the peer's socket, read or not. False on timeout.
  bool wait_acknowledged(std::chrono::milliseconds timeout = 10s);
  void shutdown_write();

  // One response (possibly an interim 1xx); nullopt on timeout, EOF before a complete response,
  // or unparsable bytes. `head_request` = the request was HEAD (no body follows).
  std::optional<Response> read_response(std::chrono::milliseconds timeout = 10s, bool head_request = false);
  // Only a response head (e.g. the answer to CONNECT); bytes after it stay buffered.
  std::optional<Response> read_head(std::chrono::milliseconds timeout = 10s);
  // Everything until EOF (buffered bytes first); `complete` says whether EOF was seen in time.
  std::string read_until_eof(std::chrono::milliseconds timeout = 10s, bool* complete = nullptr);
  // Exactly n bytes (fewer on EOF/timeout).
  std::string read_exactly(std::size_t n, std::chrono::milliseconds timeout = 10s);
  // True once the peer closed (EOF or RST) within the timeout; data received meanwhile is dropped.
  bool wait_closed(std::chrono::milliseconds timeout = 10s);
  // Reads until the buffered bytes contain `needle` (they stay buffered); false on timeout/EOF.
  bool read_until_contains(std::string_view needle, std::chrono::milliseconds timeout = 10s);
  // True if nothing (no data, no EOF) arrives within `d`.
  bool quiet_for(std::chrono::milliseconds d);

  const std::string& buffered() const { return buf_; }
  // Why the last read_response/read_head returned nullopt (timeout, EOF, parse error + bytes).
  const std::string& last_error() const { return last_error_; }
  bool eof() const { return eof_; }

 private:
  RawConnection() = default;
  // Appends what arrives before the deadline to buf_; false on timeout or EOF/error.
  bool fill(std::chrono::steady_clock::time_point deadline);

  int fd_ = -1;
  std::string buf_;
  bool eof_ = false;
  std::string last_error_;
};

// Convenience: one request on a fresh connection, read one final response (skips 1xx).
std::optional<Response> raw_exchange(std::uint16_t port, std::string_view request_bytes,
                                     std::chrono::milliseconds timeout = 10s);
// Why the calling thread's last raw_exchange returned nullopt.
const std::string& last_exchange_error();

// Beast-based keep-alive client to 127.0.0.1:port; throws std::runtime_error on I/O errors or
// timeouts. The request target may be absolute-form (proxy use) or origin-form.
class HttpClient {
 public:
  explicit HttpClient(std::uint16_t port, std::chrono::milliseconds timeout = 15s);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  Response request(const std::string& method, const std::string& target, const Fields& headers = {},
                   const std::string& body = {});
  Response get(const std::string& target, const Fields& headers = {}) { return request("GET", target, headers); }
  // True if the server signalled or performed a close after the last response.
  bool closed() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct CurlResult {
  int exit_code = -1;
  unsigned status = 0;
  std::string body;
  std::string err;
};

// Runs the real curl with http_proxy=http://127.0.0.1:proxy_port in its environment (and any
// no_proxy removed).
CurlResult curl(std::uint16_t proxy_port, const std::string& url, const std::vector<std::string>& extra_args = {});

// Minimal JSON value for checking error bodies.
struct Json {
  enum class Type { null, boolean, number, string, array, object } type = Type::null;
  bool b = false;
  double n = 0;
  std::string s;
  std::vector<Json> a;
  std::vector<std::pair<std::string, Json>> o;

  const Json* get(std::string_view key) const;  // object member or nullptr
};
std::optional<Json> parse_json(std::string_view text);

}  // namespace itest
