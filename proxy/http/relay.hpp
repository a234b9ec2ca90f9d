#pragma once
/** Streams a message body from one connection to another through a fixed buffer, never
    holding the whole body (Beast's relay pattern, made asynchronous). Chunked input is
    re-framed per the header fields the caller set. */
#include "proxy/net.hpp"
#include "proxy/upstream/attempt.hpp"
#include "proxy/upstream/connection.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include "proxy/http/wire/bounded_parser.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace rebound::http {

namespace bhttp = boost::beast::http;

/** limits.body_timeout and min_body_rate: a request body gets `grace`, plus one second per
    `bytes_per_second` bytes received, in all. An idle timeout alone would let a body
    trickled at a byte every few seconds hold a connection forever. */
struct body_pace {
  std::chrono::steady_clock::time_point start;
  std::chrono::milliseconds grace;
  std::uint64_t bytes_per_second;

  /// When the body must have ended, given what has arrived so far.
  std::chrono::steady_clock::time_point deadline(std::uint64_t received) const {
    return start + grace + std::chrono::milliseconds(received / bytes_per_second * 1000);
  }
};

/** A worker's spare relay buffers, in two sizes. A body streams through a buffer; kept in
    the relay's coroutine frame it made every forwarded response a malloc and free of its size
    (Asio recycles only frames under ~1 KiB). Every relay starts with a small one; a body that
    outgrows it moves to a large one, which quarters the reads, writes and resumptions per
    MiB (bench/run.sh get1m: 1.30 -> 0.82 CPU-seconds per GB, HAProxy 0.78) without giving every small
    response, or every one of 1,000 clients, 64 KiB. A worker's sessions share its one
    thread: no lock. */
class relay_buffers {
 public:
  static constexpr std::size_t small_size = 16 * 1024;
  static constexpr std::size_t large_size = 64 * 1024;

  /// A buffer taken from `owner` (null: from the heap), given back when the lease ends.
  class lease {
   public:
    lease(relay_buffers* owner, std::unique_ptr<char[]> b, std::size_t size)
        : owner_(owner), b_(std::move(b)), size_(size) {}
    lease(lease&&) noexcept = default;
    lease& operator=(lease&&) = delete;
    ~lease() {
      if (owner_ && b_) owner_->give_back(std::move(b_), size_);
    }
    char* data() { return b_.get(); }
    std::size_t size() const { return size_; }

   private:
    relay_buffers* owner_;
    std::unique_ptr<char[]> b_;
    std::size_t size_;
  };

  /// A spare buffer of `size` (small_size or large_size), or a new one when none is spare.
  lease take(std::size_t size);
  /// Takes from `pool` when there is one, else from the heap.
  static lease take_from(relay_buffers* pool, std::size_t size);

 private:
  /// More spares than this are freed: a burst of large responses does not stay resident.
  static constexpr std::size_t max_spare = 16;
  void give_back(std::unique_ptr<char[]> b, std::size_t size);
  std::vector<std::unique_ptr<char[]>>& spares(std::size_t size) { return size == large_size ? large_ : small_; }
  std::vector<std::unique_ptr<char[]>> small_;
  std::vector<std::unique_ptr<char[]>> large_;
};

/// Which side failed, so the caller can answer the right party.
struct relay_result {
  error_code read_error;   ///< from the side being read
  error_code write_error;  ///< from the side being written
  bool ok() const { return !read_error && !write_error; }
};

/// Where a body is read from: the connection, what was read past the head, the parser.
template <class Stream, class Parser>
struct body_from {
  Stream& stream;
  beast::flat_buffer& buffer;
  Parser& parser;
};
using request_body_from = body_from<beast::tcp_stream, request_parser>;
using response_body_from = body_from<upstream::connection, response_parser>;

/// How a relay runs: each read and each write must progress within `idle`; a request body
/// also keeps to `pace`. Buffers come from `buffers` (null: the heap).
struct relay_pacing {
  std::chrono::milliseconds idle;
  relay_buffers* buffers = nullptr;
  const body_pace* pace = nullptr;
};

/** Reads the rest of `from`'s message and writes it to `to`, after `head` (the serialized
    head, wire_head.hpp; empty when it went out already), framed as the fields of the
    parser's message say (chunked or not). `prefix` is body already read from the client;
    it goes out first. */
net::awaitable<relay_result> relay_request_body(request_body_from from, upstream::connection& to, std::string_view head,
                                                std::string_view prefix, const relay_pacing& how);

/** Forwards an interim (1xx) response head to an HTTP/1.1 client, hop-by-hop fields
    removed: RFC 9110 section 15.2 has a proxy forward 1xx answers (103 Early Hints, 102)
    it did not ask for. */
net::awaitable<error_code> relay_interim(beast::tcp_stream& client, const response_head& head,
                                         std::chrono::milliseconds idle);

/// An exchange's interim answers, passed on to an HTTP/1.1 client by relay_interim.
class interim_to_client final : public upstream::interim_listener {
 public:
  interim_to_client(beast::tcp_stream& client, std::chrono::milliseconds idle) : client_(client), idle_(idle) {}
  net::awaitable<error_code> interim(const response_head& head) override {
    return relay_interim(client_, head, idle_);
  }

 private:
  beast::tcp_stream& client_;
  std::chrono::milliseconds idle_;
};

/// The same for an upstream's response body, to the client.
net::awaitable<relay_result> relay_response_body(response_body_from from, beast::tcp_stream& to, std::string_view head,
                                                 const relay_pacing& how);

}  // namespace rebound::http
