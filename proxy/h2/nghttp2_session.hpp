#pragma once
/** What the HTTP/2 server and client share around an nghttp2 session: ownership, header
    lists, a DATA source over a body held whole, and the writer that drains nghttp2's output
    onto the socket. nghttp2 does no I/O of its own; the owner feeds it bytes it read
    (nghttp2_session_mem_recv) and this writer sends what it queued (mem_send). Everything of
    one session runs on one thread, so none of this locks. */
#include "proxy/h2/body_pipe.hpp"
#include "proxy/h2/message.hpp"
#include "proxy/net.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <nghttp2/nghttp2.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace rebound::h2::detail {

struct session_deleter {
  void operator()(nghttp2_session* s) const noexcept { nghttp2_session_del(s); }
};
using session_ptr = std::unique_ptr<nghttp2_session, session_deleter>;

struct callbacks_deleter {
  void operator()(nghttp2_session_callbacks* c) const noexcept { nghttp2_session_callbacks_del(c); }
};
using callbacks_ptr = std::unique_ptr<nghttp2_session_callbacks, callbacks_deleter>;

callbacks_ptr new_callbacks();

/** The callbacks both sides of a connection take from nghttp2, registered from `Side`'s
    static members of the same names: a stream's head, field by field; its body; its frames;
    its close. */
template <class Side>
callbacks_ptr stream_callbacks() {
  auto cbs = new_callbacks();
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs.get(), &Side::on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs.get(), &Side::on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs.get(), &Side::on_data_chunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs.get(), &Side::on_frame_recv);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs.get(), &Side::on_stream_close);
  return cbs;
}

/// Header list for nghttp2, pointing into `fs` (nghttp2 copies the bytes on submit).
std::vector<nghttp2_nv> to_nv(const fields& fs);

/// A field from the bytes nghttp2 hands a header callback.
inline field make_field(const std::uint8_t* name, std::size_t namelen, const std::uint8_t* value,
                        std::size_t valuelen) {
  return {std::string(reinterpret_cast<const char*>(name), namelen),
          std::string(reinterpret_cast<const char*>(value), valuelen)};
}

/** What a stream's DATA frames are read from: a body held whole, then trailers, which the
    read callback submits once the body is out (nghttp2_submit_trailer's documented use). A
    null `body` means its owner is gone: the stream is reset rather than read from freed memory. */
struct body_source {
  const std::string* body = nullptr;
  const fields* trailers = nullptr;
  std::size_t offset = 0;
};

/// A data provider over `src`, which must stay where it is while the stream sends.
nghttp2_data_provider make_provider(body_source& src);

/** A data provider over a pipe (a streamed body): DATA as it arrives, deferred while the pipe
    is empty (the producer's `on_data` resumes it), trailers after its end; a failed pipe
    ends the stream with its `trailers_on_failure`, or resets it when there are none. `pipe`
    must outlive the stream. */
nghttp2_data_provider make_provider(body_pipe& pipe);

/// Sessions that relay streamed bodies give flow-control credit back themselves (body_pipe).
struct option_deleter {
  void operator()(nghttp2_option* o) const noexcept { nghttp2_option_del(o); }
};
using option_ptr = std::unique_ptr<nghttp2_option, option_deleter>;
option_ptr manual_window_options();

/// Whether a message needs DATA frames (a body, or trailers that must follow a DATA end).
inline bool needs_data(const std::string& body, const fields& trailers) { return !body.empty() || !trailers.empty(); }

/// The writer's state, shared with the reader that wakes it.
struct pump {
  explicit pump(const net::executor& ex) : wake(ex) {}
  nghttp2_session* session = nullptr;
  net::steady_timer wake;     ///< a waitable event: cancel() wakes the writer
  bool read_done = false;     ///< the reader ended: flush what is queued, then stop
  bool write_failed = false;  ///< a write or nghttp2's send failed
  bool writing = false;
  std::chrono::steady_clock::time_point write_started;

  void notify() { wake.cancel(); }
};

/// Writes are coalesced up to this size: many small frames (HEADERS, WINDOW_UPDATE) in one send.
inline constexpr std::size_t coalesce_limit = 64 * 1024;

/** Sends what nghttp2 queues, one write at a time, until nghttp2 wants neither to read nor to
    write (GOAWAY exchanged and no stream left), the reader ended, or a write failed. Then
    closes the socket, which ends the reader's pending read. */
template <class Stream>
net::awaitable<void> write_loop(pump& p, Stream& stream) {
  std::string out;
  for (;;) {
    out.clear();
    while (out.size() < coalesce_limit) {
      const std::uint8_t* data = nullptr;
      auto const n = nghttp2_session_mem_send(p.session, &data);
      if (n < 0) {
        p.write_failed = true;
        break;
      }
      if (n == 0) break;
      out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    if (!out.empty()) {
      p.writing = true;
      p.write_started = std::chrono::steady_clock::now();
      auto [ec, n] = co_await net::async_write(stream, net::buffer(out), use_tuple);
      p.writing = false;
      if (ec) p.write_failed = true;
      if (!p.write_failed) continue;
    }
    if (p.write_failed || p.read_done) break;
    if (!nghttp2_session_want_read(p.session) && !nghttp2_session_want_write(p.session)) break;
    p.wake.expires_at(std::chrono::steady_clock::time_point::max());
    co_await p.wake.async_wait(use_tuple);
  }
  error_code ignored;
  stream.socket().shutdown(tcp_socket::shutdown_send, ignored);
  stream.socket().close(ignored);
}

}  // namespace rebound::h2::detail
