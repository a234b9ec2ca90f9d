#pragma once
/** The state of one HTTP/2 server connection (server_connection.hpp: serve): its streams,
    their requests held whole or streamed, their answers, the connection's limits, drain and
    idleness. Its I/O loop is here; what nghttp2 reports as frames arrive is in
    server_callbacks.cpp. Internal to h2/. */
#include "proxy/h2/answer_budget.hpp"
#include "proxy/h2/nghttp2_session.hpp"
#include "proxy/h2/server_connection.hpp"
#include "proxy/runtime/session_registry.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <exception>
#include <memory>
#include <unordered_map>
#include <vector>

namespace rebound::h2::detail {

using namespace boost::asio::experimental::awaitable_operators;

using clock = std::chrono::steady_clock;
/// How often drain and idleness are looked at when nothing is read.
inline constexpr std::chrono::milliseconds tick{250};
/// Per-stream receive window: a unary gRPC request arrives without waiting for WINDOW_UPDATEs.
inline constexpr std::int32_t request_stream_window = 1 << 20;
/// A header block that decodes to this many times max_header_list is an attack (an HPACK
/// bomb: one-byte references to a large table entry), not a big head: the connection ends
/// rather than spend a core decoding it. Between 1x and this, the stream is answered 431.
inline constexpr std::size_t header_bomb_factor = 4;
/// Rapid reset (CVE-2023-44487): once a connection has opened this many streams, it is ended
/// with ENHANCE_YOUR_CALM when its client reset at least half of them before their answer.
inline constexpr std::size_t reset_window_streams = 100;

struct server_stream {
  explicit server_stream(std::int32_t i) : id(i) {}
  std::int32_t id;
  message request;
  std::size_t header_bytes = 0;
  bool head_too_large = false;
  bool body_too_large = false;
  bool grpc = false;           ///< content-type application/grpc...: rebound's refusals are gRPC statuses
  bool refused_early = false;  ///< answered before its request ended (413, 408): the rest is not wanted
  bool request_complete = false;
  bool answered = false;
  bool closed = false;
  net::cancellation_signal cancel;
  message response;
  detail::body_source source;
  call_handler handler;                      ///< what its head decided (handlers::at_head)
  bool streaming = false;                    ///< handed to the stream handler at its head
  std::shared_ptr<body_pipe> request_pipe;   ///< streaming: the request body as it arrives
  std::shared_ptr<body_pipe> response_pipe;  ///< streaming: the answer's body
  std::size_t held = 0;                      ///< request bytes held whole whose connection credit is still owed
  clock::time_point started = clock::now();
  std::size_t sent = 0;  ///< how far the answer's DATA had gone at the last tick
  clock::time_point progress_at = clock::now();
};

inline message status_only(const char* status) {
  message m;
  m.head.push_back({":status", status});
  return m;
}

class server_state {
 public:
  server_state(beast::tcp_stream& stream, const server_limits& limits, handlers handler, session_signals signals)
      : stream_(stream),
        limits_(limits),
        handler_(std::move(handler)),
        draining_(signals.draining),
        guard_(signals.guard),
        pump_(stream.get_executor()),
        ticker_(stream.get_executor()),
        handlers_done_(stream.get_executor()) {}

  net::awaitable<void> run(beast::flat_buffer& preread) {
    if (!start()) co_return;
    stream_.expires_never();
    if (guard_) guard_->set_idle(true);
    {
      auto reader = read_loop(preread);
      auto writer = write_then_close();
      auto ticks = tick_loop();
      co_await (std::move(reader) && std::move(writer) && std::move(ticks));
    }
    // The connection is over: handlers still running answer nobody.
    for (auto& [id, ss] : streams_) {
      ss->closed = true;
      detach_pipes(*ss);
      ss->cancel.emit(net::cancellation_type::terminal);
    }
    while (running_handlers_ > 0) {
      handlers_done_.expires_at(clock::time_point::max());
      co_await handlers_done_.async_wait(use_tuple);
    }
    streams_.clear();
  }

  static net::awaitable<void> run_handler(server_state& st, std::shared_ptr<server_stream> ss) {
    message response;
    bool failed = false;
    if (ss->closed) co_return;
    try {
      message request = std::move(ss->request);
      request.budget = st.answers_;  // its answer is held against the connection's budget
      auto call = ss->handler.whole(std::move(request));
      response = co_await std::move(call);
    } catch (...) {
      failed = true;  // a handler's exception must not end the connection
    }
    if (ss->closed) co_return;  // reset by the client meanwhile: the answer is dropped
    ss->response = failed ? status_only("502") : std::move(response);
    st.answer(*ss);
  }

  static net::awaitable<void> run_stream_handler(server_state& st, std::shared_ptr<server_stream> ss) {
    if (ss->closed) co_return;
    responder r(st, ss);
    try {
      auto call = ss->handler.stream(streamed_request{std::move(ss->request.head), ss->request_pipe, &r});
      co_await std::move(call);
    } catch (...) {
      // a handler's exception must not end the connection: answered below
    }
    if (!ss->closed && !ss->answered) r.respond(status_only("502"));
  }

  void handler_finished() {
    --running_handlers_;
    handlers_done_.cancel();
  }

 private:
  struct handler_done {
    server_state* st;
    std::shared_ptr<server_stream> ss;  // the cancellation slot lives in it
    void operator()(std::exception_ptr) const noexcept { st->handler_finished(); }
  };

  class responder final : public call_responder {
   public:
    responder(server_state& st, std::shared_ptr<server_stream> ss) : st_(st), ss_(std::move(ss)) {}
    void respond(message whole) override {
      if (ss_->closed || ss_->answered) return;
      ss_->response = std::move(whole);
      st_.answer(*ss_);
    }
    void respond(fields head, std::shared_ptr<body_pipe> body) override {
      st_.answer_streamed(*ss_, std::move(head), std::move(body));
    }

   private:
    server_state& st_;
    std::shared_ptr<server_stream> ss_;
  };

  bool start() {
    auto cbs = detail::stream_callbacks<server_state>();
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs.get(), &on_frame_send);
    nghttp2_session* s = nullptr;
    auto options = detail::manual_window_options();
    if (nghttp2_session_server_new2(&s, cbs.get(), this, options.get()) != 0) return false;
    session_.reset(s);
    pump_.session = s;
    answers_ = std::make_shared<answer_budget>(stream_.get_executor(), limits_.answer_buffer);
    std::array<nghttp2_settings_entry, 3> settings{{
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits_.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<std::uint32_t>(request_stream_window)},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(limits_.max_header_list)},
    }};
    if (nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, settings.data(), settings.size()) != 0) return false;
    auto const window = std::max<std::size_t>(limits_.connection_buffer, NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE);
    nghttp2_session_set_local_window_size(
        s, NGHTTP2_FLAG_NONE, 0, static_cast<std::int32_t>(std::min<std::size_t>(window, NGHTTP2_MAX_WINDOW_SIZE)));
    last_activity_ = clock::now();
    return true;
  }

  net::awaitable<void> read_loop(beast::flat_buffer& preread) {
    bool ok = true;
    if (preread.size() > 0) {
      auto const d = preread.data();
      ok = feed(static_cast<const std::uint8_t*>(d.data()), d.size());
      preread.consume(preread.size());
    }
    std::array<std::uint8_t, 16 * 1024> buf{};
    while (ok && !closed_) {
      auto [ec, n] = co_await stream_.async_read_some(net::buffer(buf), use_tuple);
      if (ec) break;
      ok = feed(buf.data(), n);
    }
    pump_.read_done = true;
    pump_.notify();
  }

  bool feed(const std::uint8_t* data, std::size_t n) {
    last_activity_ = clock::now();
    auto const rv = nghttp2_session_mem_recv(session_.get(), data, n);
    // Handlers start only after everything read so far is processed: a stream that a later
    // frame of the same read reset (rapid reset) is never started, so never sent upstream.
    start_ready();
    check_drain(false);
    pump_.notify();
    // A fatal error: what nghttp2 queued (a GOAWAY) still goes out before the close.
    return rv >= 0;
  }

  net::awaitable<void> write_then_close() {
    co_await detail::write_loop(pump_, stream_);
    closed_ = true;
    ticker_.cancel();
  }

  net::awaitable<void> tick_loop() {
    while (!closed_) {
      ticker_.expires_after(tick);
      co_await ticker_.async_wait(use_tuple);
      if (closed_) break;
      check_drain(true);
      auto const now = clock::now();
      if (streams_.empty() && !idle_closing_ && now - last_activity_ >= limits_.idle_timeout) {
        idle_closing_ = true;  // a GOAWAY, then nghttp2 wants no more I/O and the writer closes
        nghttp2_session_terminate_session(session_.get(), NGHTTP2_NO_ERROR);
      }
      check_streams(now);
      if (pump_.writing && now - pump_.write_started >= limits_.idle_timeout) {
        error_code ignored;  // a client that reads nothing for that long is gone
        stream_.socket().close(ignored);
      }
      pump_.notify();
    }
  }

  /// A drain: first a shutdown notice, then (a tick later, so requests in flight arrive)
  /// the GOAWAY naming the last stream that will be processed.
  void check_drain(bool from_tick) {
    if (!draining_ || !*draining_) return;
    if (drain_stage_ == 0) {
      nghttp2_submit_shutdown_notice(session_.get());
      drain_stage_ = 1;
    } else if (drain_stage_ == 1 && from_tick) {
      nghttp2_submit_goaway(session_.get(), NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_.get()),
                            NGHTTP2_NO_ERROR, nullptr, 0);
      drain_stage_ = 2;
    }
  }

  std::shared_ptr<server_stream> find(std::int32_t id) {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : it->second;
  }

  void answer(server_stream& ss) {
    if (ss.closed || ss.answered) return;
    ss.answered = true;
    ss.progress_at = clock::now();  // the client's time to take the answer starts now
    auto& m = ss.response;
    if (!m.find(":status")) m.head.insert(m.head.begin(), {":status", "502"});
    auto nv = detail::to_nv(m.head);
    ss.source = {&m.body, &m.trailers, 0};
    auto provider = detail::make_provider(ss.source);
    bool const with_data = detail::needs_data(m.body, m.trailers);
    if (nghttp2_submit_response(session_.get(), ss.id, nv.data(), nv.size(), with_data ? &provider : nullptr) != 0)
      nghttp2_submit_rst_stream(session_.get(), NGHTTP2_FLAG_NONE, ss.id, NGHTTP2_INTERNAL_ERROR);
    pump_.notify();
  }

  /// A streamed answer: its head now, its DATA as the pipe fills.
  void answer_streamed(server_stream& ss, fields head, std::shared_ptr<body_pipe> body) {
    if (ss.closed || ss.answered) {
      body->abandon();
      return;
    }
    ss.answered = true;
    ss.progress_at = clock::now();
    ss.response.head = std::move(head);
    if (!ss.response.find(":status")) ss.response.head.insert(ss.response.head.begin(), {":status", "200"});
    ss.response_pipe = std::move(body);
    ss.response_pipe->on_data = [this, id = ss.id] {
      nghttp2_session_resume_data(session_.get(), id);
      pump_.notify();
    };
    auto nv = detail::to_nv(ss.response.head);
    auto provider = detail::make_provider(*ss.response_pipe);
    if (nghttp2_submit_response(session_.get(), ss.id, nv.data(), nv.size(), &provider) != 0)
      nghttp2_submit_rst_stream(session_.get(), NGHTTP2_FLAG_NONE, ss.id, NGHTTP2_INTERNAL_ERROR);
    pump_.notify();
  }

  /// Flow-control credit for `n` bytes of a request read out of its pipe.
  void consume(std::int32_t id, std::size_t n) {
    if (streams_.contains(id))
      nghttp2_session_consume(session_.get(), id, n);
    else
      nghttp2_session_consume_connection(session_.get(), n);
    pump_.notify();
  }

  /// A request whose head was picked for streaming: its handler starts after this read.
  void start_stream(server_stream& ss) {
    ss.streaming = true;
    ss.request_pipe = std::make_shared<body_pipe>();
    ss.request_pipe->on_consumed = [this, id = ss.id](std::size_t n) { consume(id, n); };
    ready_.push_back(find(ss.id));
  }

  /// Starts the handlers of the streams that became ready during the last read, unless the
  /// client has reset them meanwhile.
  void start_ready() {
    auto ready = std::move(ready_);
    ready_.clear();
    for (auto& ss : ready) {
      if (ss->closed) continue;
      ++running_handlers_;
      auto slot = ss->cancel.slot();
      if (ss->streaming)
        net::co_spawn(stream_.get_executor(), run_stream_handler(*this, ss),
                      net::bind_cancellation_slot(slot, handler_done{this, ss}));
      else
        net::co_spawn(stream_.get_executor(), run_handler(*this, ss),
                      net::bind_cancellation_slot(slot, handler_done{this, ss}));
    }
  }

  /// Connection credit for request bytes held whole that are let go.
  void release_held(server_stream& ss) {
    if (ss.held == 0) return;
    nghttp2_session_consume_connection(session_.get(), ss.held);
    ss.held = 0;
    pump_.notify();
  }

  /** Once a tick: a request held whole that arrives slower than body_timeout and
      min_body_rate allow is answered 408 and its bytes let go; an answer the client has taken
      nothing of for idle_timeout while some is there for it (a zero window it never opens),
      whole or relayed, has its stream reset, which frees it. */
  /** rebound's own refusal of a stream: a gRPC call's as its handler says (a trailers-only
      status with `rebound-error`), anything else's as the HTTP status alone. */
  message refusal(const server_stream& ss, stream_refusal why, std::string_view text) const {
    if (ss.grpc && handler_.refuse_call) return handler_.refuse_call(why, text);
    switch (why) {
      case stream_refusal::too_slow:
        return status_only("408");
      case stream_refusal::head_too_large:
        return status_only("431");
      case stream_refusal::body_too_large:
        break;
    }
    return status_only("413");
  }

  void check_streams(clock::time_point now) {
    for (auto& [id, ss] : streams_) {
      if (!ss->streaming && !ss->request_complete && !ss->answered) {
        auto const allowed =
            limits_.body_timeout +
            std::chrono::milliseconds(limits_.min_body_rate > 0 ? ss->request.body.size() * 1000 / limits_.min_body_rate
                                                                : 0);
        if (now - ss->started > allowed) {
          ss->request = {};
          release_held(*ss);
          ss->refused_early = true;
          ss->response =
              refusal(*ss, stream_refusal::too_slow, "the request message did not arrive within limits.body_timeout");
          answer(*ss);
        }
        continue;
      }
      if (ss->answered && ss->response_pipe) {
        // A relayed answer: the client must keep taking what is there for it, the end included.
        auto const& pipe = *ss->response_pipe;
        if (pipe.taken() != ss->sent) {
          ss->sent = pipe.taken();
          ss->progress_at = now;
        } else if (pipe.owes_consumer() && now - ss->progress_at >= limits_.idle_timeout) {
          nghttp2_submit_rst_stream(session_.get(), NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
        }
      } else if (ss->answered && ss->source.body) {
        if (ss->source.offset != ss->sent) {
          ss->sent = ss->source.offset;
          ss->progress_at = now;
        } else if (ss->source.offset < ss->source.body->size() && now - ss->progress_at >= limits_.idle_timeout) {
          nghttp2_submit_rst_stream(session_.get(), NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
        }
      }
    }
  }

  /// The stream is over: the pipes are told, and never call into this connection again.
  void detach_pipes(server_stream& ss) {
    if (ss.request_pipe) {
      if (auto const owed = ss.request_pipe->detach_producer(); owed > 0)
        nghttp2_session_consume_connection(session_.get(), owed);
    }
    if (ss.response_pipe) {
      ss.response_pipe->on_data = nullptr;
      ss.response_pipe->abandon();
    }
  }

  void request_ended(server_stream& ss) {
    ss.request_complete = true;
    if (ss.answered) return;  // a 413 went out already
    if (ss.head_too_large) {
      ss.response =
          refusal(ss, stream_refusal::head_too_large, "the request metadata is larger than limits.max_request_head");
      answer(ss);
      return;
    }
    ready_.push_back(find(ss.id));
  }

  void set_idle() {
    if (guard_) guard_->set_idle(streams_.empty());
  }

  static server_state& self(void* user) { return *static_cast<server_state*>(user); }

 public:
  // What nghttp2 tells the connection (server_callbacks.cpp), public for stream_callbacks.
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int on_header(nghttp2_session* session, const nghttp2_frame* frame, const std::uint8_t* name,
                       std::size_t namelen, const std::uint8_t* value, std::size_t valuelen, std::uint8_t, void* user);
  static int on_data_chunk(nghttp2_session* session, std::uint8_t, std::int32_t stream_id, const std::uint8_t* data,
                           std::size_t len, void* user);
  static int on_frame_recv(nghttp2_session* session, const nghttp2_frame* frame, void* user);
  static int on_frame_send(nghttp2_session* session, const nghttp2_frame* frame, void* user);
  static int on_stream_close(nghttp2_session*, std::int32_t stream_id, std::uint32_t, void* user);

 private:
  beast::tcp_stream& stream_;
  const server_limits& limits_;
  handlers handler_;
  const bool* draining_;
  runtime::session_guard* guard_;
  detail::session_ptr session_;
  detail::pump pump_;
  net::steady_timer ticker_;
  net::steady_timer handlers_done_;
  std::unordered_map<std::int32_t, std::shared_ptr<server_stream>> streams_;
  std::vector<std::shared_ptr<server_stream>> ready_;  ///< requests that became ready in this read
  std::shared_ptr<answer_budget> answers_;  ///< what the answers held whole may take (answer_budget.hpp)
  std::size_t streams_opened_ = 0;
  std::size_t premature_resets_ = 0;  ///< streams the client reset before their answer
  std::size_t running_handlers_ = 0;
  clock::time_point last_activity_;
  int drain_stage_ = 0;
  bool idle_closing_ = false;
  bool closed_ = false;
};

}  // namespace rebound::h2::detail
