#include "proxy/h2/client_connection.hpp"

#include "proxy/h2/answer_budget.hpp"
#include "proxy/h2/nghttp2_session.hpp"
#include "proxy/upstream/connect.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

namespace rebound::h2 {

using namespace boost::asio::experimental::awaitable_operators;

void throw_exception_from_error(const failure& f, const boost::source_location&) {
  throw std::runtime_error(f.message);
}

namespace {

/** Per-stream receive window, HTTP/2's default: what an upstream may send a call whose
    credit is held back (answer_budget.hpp), so what a client that reads nothing can make
    rebound hold past its budget is 64 KiB per call. gRPC's own implementations start there. */
constexpr std::int32_t response_stream_window = 64 << 10;
/// The window of a stream not held against a budget: a unary response arrives without waiting
/// for WINDOW_UPDATEs, a streamed one is credited as its client takes it.
constexpr std::int32_t unbudgeted_stream_window = 1 << 20;
constexpr std::int32_t connection_window = 16 << 20;

struct client_stream {
  explicit client_stream(const net::executor& ex) : done(ex) {}
  ~client_stream() {
    if (!budget) return;
    budget->settle(this, 0);       // an answer never handed over (failed, timed out)
    budget->release(held, false);  // is no longer let through, and its bytes are free
  }
  client_stream(const client_stream&) = delete;
  client_stream& operator=(const client_stream&) = delete;
  net::steady_timer done;  ///< a waitable event: cancelled when the stream ends
  detail::body_source source;
  message response;
  fields block;  ///< the header block being received
  std::size_t max_body = 0;
  bool have_head = false;
  bool finished = false;
  std::optional<failure> fail;
  std::shared_ptr<body_pipe> request_pipe;   ///< streamed: the request body as it arrives
  std::shared_ptr<body_pipe> response_pipe;  ///< streamed: where the response body goes
  bool detached = false;                     ///< the pipes were let go: nothing more goes into them
  // An answer held whole against its caller's connection budget (answer_budget.hpp).
  std::shared_ptr<answer_budget> budget;
  std::size_t held = 0;        ///< bytes of `response.body` counted in `budget`
  std::size_t owed = 0;        ///< stream credit held back while the budget is full
  bool awaiting_room = false;  ///< a when_room callback is pending
  std::int32_t id = 0;
  std::weak_ptr<client_connection> owner;
};

failure make_failure(failure_kind kind, std::string message) { return failure{kind, std::move(message)}; }

}  // namespace

struct client_connection::impl {
  explicit impl(upstream::connection c) : conn(std::move(c)), pump(conn.get_executor()) {}

  upstream::connection conn;
  detail::session_ptr session;
  detail::pump pump;
  std::unordered_map<std::int32_t, std::shared_ptr<client_stream>> streams;
  bool closed = false;
  bool goaway = false;
  bool shutting_down = false;
  bool protocol_failed = false;
  clock::time_point idle_since = clock::now();  ///< when the last stream ended

  std::shared_ptr<client_stream> find(std::int32_t id) {
    auto it = streams.find(id);
    return it == streams.end() ? nullptr : it->second;
  }

  static impl& self(void* user) { return *static_cast<impl*>(user); }

  static void finish(client_stream& st, std::optional<failure> f) {
    if (st.finished) return;
    st.finished = true;
    if (!st.fail) st.fail = std::move(f);
    st.source.body = nullptr;
    st.done.cancel();
  }

  bool start() {
    auto cbs = detail::stream_callbacks<impl>();
    nghttp2_session* s = nullptr;
    auto options = detail::manual_window_options();
    if (nghttp2_session_client_new2(&s, cbs.get(), this, options.get()) != 0) return false;
    session.reset(s);
    pump.session = s;
    std::array<nghttp2_settings_entry, 2> settings{{
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<std::uint32_t>(response_stream_window)},
    }};
    if (nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, settings.data(), settings.size()) != 0) return false;
    nghttp2_session_set_local_window_size(s, NGHTTP2_FLAG_NONE, 0, connection_window);
    return true;
  }

  net::awaitable<void> read_loop() {
    std::array<std::uint8_t, 16 * 1024> buf{};
    while (!pump.read_done) {
      auto [ec, n] = co_await conn.async_read_some(net::buffer(buf), use_tuple);
      if (ec) break;
      auto const rv = nghttp2_session_mem_recv(session.get(), buf.data(), n);
      pump.notify();
      if (rv < 0) {
        protocol_failed = true;  // what nghttp2 queued (a GOAWAY) still goes out
        break;
      }
    }
    pump.read_done = true;
    pump.notify();
  }

  /// Runs the connection until it ends, then fails the streams still open.
  static net::awaitable<void> run(std::shared_ptr<client_connection> owner) {
    impl& i = *owner->impl_;
    {
      auto reader = i.read_loop();
      auto writer = detail::write_loop(i.pump, i.conn);
      co_await (std::move(reader) && std::move(writer));
    }
    i.closed = true;
    auto const kind = i.protocol_failed ? failure_kind::protocol_error : failure_kind::connection_lost;
    auto streams = std::move(i.streams);
    i.streams.clear();
    for (auto& [id, st] : streams) {
      i.detach_pipes(*st);
      finish(*st, make_failure(kind, kind == failure_kind::protocol_error
                                         ? "the upstream broke HTTP/2"
                                         : "the upstream connection ended before the stream did"));
    }
  }

  /// Flow-control credit for `n` bytes of a streamed response read out of its pipe.
  void consume(std::int32_t id, std::size_t n) {
    if (closed) return;
    if (streams.contains(id))
      nghttp2_session_consume(session.get(), id, n);
    else
      nghttp2_session_consume_connection(session.get(), n);
    pump.notify();
  }

  /** The stream credit `st` was owed while its budget was full, once the budget has room; the
      connection's credit was given at once. Asked again if the budget filled meanwhile. */
  static void credit_when_room(const std::shared_ptr<client_stream>& st) {
    if (st->awaiting_room) return;
    st->awaiting_room = true;
    st->budget->when_room([weak = std::weak_ptr<client_stream>(st)] {
      auto s = weak.lock();
      if (!s) return;
      s->awaiting_room = false;
      auto owner = s->owner.lock();
      if (!owner || s->finished || s->owed == 0) return;
      auto& i = *owner->impl_;
      if (i.closed || !i.streams.contains(s->id)) return;
      if (!s->budget->may_receive(s.get())) return credit_when_room(s);
      nghttp2_session_consume_stream(i.session.get(), s->id, std::exchange(s->owed, 0));
      i.pump.notify();
    });
  }

  /// A stream not held against a budget gets the window it always had.
  void widen_window(std::int32_t id) {
    nghttp2_session_set_local_window_size(session.get(), NGHTTP2_FLAG_NONE, id, unbudgeted_stream_window);
  }

  void reset(std::int32_t id, std::uint32_t code) {
    if (closed) return;
    nghttp2_submit_rst_stream(session.get(), NGHTTP2_FLAG_NONE, id, code);
    pump.notify();
  }

  /// The stream is over: its pipes are told, and never call into this connection again.
  void detach_pipes(client_stream& st) {
    if (st.detached) return;
    st.detached = true;
    // Both stay referenced while nghttp2 may still read the request's DATA source.
    // Not abandoned: a retry may send it again.
    if (st.request_pipe && st.request_pipe->consumer == &st) {
      st.request_pipe->on_data = nullptr;
      st.request_pipe->consumer = nullptr;
    }
    if (st.response_pipe) {
      auto const owed = st.response_pipe->detach_producer();
      if (owed > 0 && !closed) nghttp2_session_consume_connection(session.get(), owed);
    }
  }

  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    if (auto st = self(user).find(frame->hd.stream_id)) st->block.clear();
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name, std::size_t namelen,
                       const std::uint8_t* value, std::size_t valuelen, std::uint8_t, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    if (auto st = self(user).find(frame->hd.stream_id))
      st->block.push_back(detail::make_field(name, namelen, value, valuelen));
    return 0;
  }

  static int on_data_chunk(nghttp2_session* session, std::uint8_t, std::int32_t stream_id, const std::uint8_t* data,
                           std::size_t len, void* user) {
    auto st = self(user).find(stream_id);
    if (st && st->response_pipe && !st->detached) {
      st->response_pipe->append(data, len);  // credited as the client side takes it
      return 0;
    }
    // Held whole (bounded by the exchange's limit): credited at once, except the stream's
    // credit while the caller's connection holds its budget of answers (answer_budget.hpp).
    bool const kept = st && !st->fail && st->response.body.size() + len <= st->max_body;
    if (kept && st->budget) {
      nghttp2_session_consume_connection(session, len);
      st->budget->hold(len);
      st->held += len;
      if (st->budget->may_receive(st.get())) {
        nghttp2_session_consume_stream(session, stream_id, len);
      } else {
        st->owed += len;
        credit_when_room(st);
      }
    } else {
      nghttp2_session_consume(session, stream_id, len);
    }
    if (!st || st->fail) return 0;
    if (!kept) {
      st->fail = make_failure(failure_kind::too_large,
                              "the upstream's response body is larger than " + std::to_string(st->max_body) + " bytes");
      st->response.body = std::string();
      if (st->budget) st->budget->release(std::exchange(st->held, 0), false);
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
      return 0;
    }
    auto& body = st->response.body;
    if (body.empty() && len >= 5) {
      // A gRPC message says its length up front (1 flag byte, 4 bytes big-endian): room for
      // it at once, instead of a string that doubles its way there and holds 1.5x meanwhile.
      std::size_t const size = 5 + (std::size_t{data[1]} << 24 | std::size_t{data[2]} << 16 |
                                    std::size_t{data[3]} << 8 | std::size_t{data[4]});
      if (size <= st->max_body) body.reserve(size);
    }
    body.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }

  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto& i = self(user);
    if (frame->hd.type == NGHTTP2_GOAWAY) {
      // nghttp2 itself closes the streams above last_stream_id with REFUSED_STREAM.
      i.goaway = true;
      return 0;
    }
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    auto st = i.find(frame->hd.stream_id);
    if (!st) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS) {
      if (frame->headers.cat == NGHTTP2_HCAT_RESPONSE) {
        auto const* status = message::find_in(st->block, ":status");
        // 1xx heads are informational (RFC 9110 section 15.2): the final head comes later.
        if (status && !status->empty() && (*status)[0] == '1') return 0;
        st->response.head = std::move(st->block);
        st->have_head = true;
        if (st->response_pipe) st->done.cancel();  // a streamed exchange's caller waits for the head only
      } else if (frame->headers.cat == NGHTTP2_HCAT_HEADERS && st->have_head) {
        st->response.trailers = std::move(st->block);
      }
      st->block.clear();
    }
    if (st->response_pipe && !st->detached && st->have_head && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
      st->response_pipe->end(std::move(st->response.trailers));
    return 0;
  }

  static int on_stream_close(nghttp2_session*, std::int32_t stream_id, std::uint32_t error_code, void* user) {
    auto& i = self(user);
    auto it = i.streams.find(stream_id);
    if (it == i.streams.end()) return 0;
    auto st = std::move(it->second);
    i.streams.erase(it);
    if (i.streams.empty()) i.idle_since = clock::now();
    std::optional<failure> f;
    if (error_code == NGHTTP2_REFUSED_STREAM)
      f = make_failure(failure_kind::refused, "the upstream refused the stream; it was not processed");
    else if (error_code == NGHTTP2_PROTOCOL_ERROR)
      f = make_failure(failure_kind::protocol_error, "the stream broke HTTP/2 (PROTOCOL_ERROR)");
    else if (error_code != NGHTTP2_NO_ERROR)
      f = make_failure(failure_kind::reset,
                       std::string("the upstream reset the stream: ") + nghttp2_http2_strerror(error_code));
    else if (!st->have_head)
      f = make_failure(failure_kind::protocol_error, "the stream ended without a response head");
    i.detach_pipes(*st);  // a body not ended fails: its client side resets its stream
    finish(*st, std::move(f));
    return 0;
  }
};

client_connection::client_connection(std::unique_ptr<impl> i) : impl_(std::move(i)) {}
client_connection::~client_connection() = default;

namespace {
struct swallow {
  void operator()(std::exception_ptr) const noexcept {}
};
}  // namespace

std::shared_ptr<client_connection> client_connection::start(upstream::connection conn) {
  auto i = std::make_unique<impl>(std::move(conn));
  bool const ok = i->start();
  std::shared_ptr<client_connection> c(new client_connection(std::move(i)));
  if (!ok) {
    c->impl_->closed = true;
    return c;
  }
  auto ex = c->impl_->conn.get_executor();
  net::co_spawn(ex, impl::run(c), swallow{});
  return c;
}

net::ip::address client_connection::peer() const { return impl_->conn.peer(); }

bool client_connection::can_take_stream() const {
  auto const& i = *impl_;
  if (i.closed || i.goaway || i.shutting_down || !i.session) return false;
  auto* s = i.session.get();
  if (!nghttp2_session_check_request_allowed(s)) return false;
  if (nghttp2_session_get_next_stream_id(s) > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max()))
    return false;
  return i.streams.size() < nghttp2_session_get_remote_settings(s, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
}

std::size_t client_connection::active_streams() const { return impl_->streams.size(); }

clock::duration client_connection::idle_for(clock::time_point now) const {
  return impl_->streams.empty() ? now - impl_->idle_since : clock::duration::zero();
}

bool client_connection::closed() const { return impl_->closed; }

void client_connection::shut_down() {
  auto& i = *impl_;
  if (i.closed || i.shutting_down || !i.session) return;
  i.shutting_down = true;
  // A client processes no streams of the server's (push is off): last stream id 0.
  nghttp2_submit_goaway(i.session.get(), NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, nullptr, 0);
  i.pump.notify();
}

net::awaitable<exchange_result> client_connection::exchange(const message& request, std::size_t max_response_body,
                                                            clock::time_point deadline) {
  auto keep = shared_from_this();  // the read loop may end while this waits
  auto& i = *impl_;
  if (i.closed || i.goaway || i.shutting_down || !i.session)
    co_return make_failure(failure_kind::refused, "the connection takes no new streams");
  auto st = std::make_shared<client_stream>(i.conn.get_executor());
  st->max_body = max_response_body;
  st->source = {&request.body, &request.trailers, 0};
  st->budget = request.budget;
  st->owner = weak_from_this();
  auto nv = detail::to_nv(request.head);
  auto provider = detail::make_provider(st->source);
  bool const with_data = detail::needs_data(request.body, request.trailers);
  auto const id =
      nghttp2_submit_request(i.session.get(), nullptr, nv.data(), nv.size(), with_data ? &provider : nullptr, nullptr);
  if (id < 0)
    co_return make_failure(
        id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE ? failure_kind::refused : failure_kind::protocol_error,
        std::string("the request could not be sent: ") + nghttp2_strerror(id));
  st->id = id;
  if (!st->budget) i.widen_window(id);
  i.streams.emplace(id, st);
  i.pump.notify();

  while (!st->finished) {
    auto cs = co_await net::this_coro::cancellation_state;
    if (cs.cancelled() != net::cancellation_type::none || clock::now() >= deadline) break;
    st->done.expires_at(deadline);
    co_await st->done.async_wait(use_tuple);
  }
  if (!st->finished) {
    // Cancelled or out of time: the stream is reset and its request body no longer read
    // (`request` belongs to the caller, who may free it once this returns).
    st->source.body = nullptr;
    if (!i.closed) {
      nghttp2_submit_rst_stream(i.session.get(), NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
      i.pump.notify();
    }
    co_return make_failure(failure_kind::timeout, "no whole response by the deadline");
  }
  if (st->fail) co_return std::move(*st->fail);
  // The answer takes its bytes of the budget along: they come back when it is let go.
  if (st->budget) {
    st->budget->settle(st.get(), st->held);
    st->response.share = std::make_shared<const budget_share>(st->budget, std::exchange(st->held, 0));
  }
  co_return std::move(st->response);
}

net::awaitable<head_result> client_connection::open_stream(const fields& head, std::shared_ptr<body_pipe> request,
                                                           std::shared_ptr<body_pipe> response,
                                                           clock::time_point deadline) {
  auto keep = shared_from_this();
  auto& i = *impl_;
  if (i.closed || i.goaway || i.shutting_down || !i.session)
    co_return make_failure(failure_kind::refused, "the connection takes no new streams");
  auto st = std::make_shared<client_stream>(i.conn.get_executor());
  st->request_pipe = request;
  st->response_pipe = response;
  auto nv = detail::to_nv(head);
  auto provider = detail::make_provider(*request);
  auto const id = nghttp2_submit_request(i.session.get(), nullptr, nv.data(), nv.size(), &provider, nullptr);
  if (id < 0)
    co_return make_failure(
        id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE ? failure_kind::refused : failure_kind::protocol_error,
        std::string("the request could not be sent: ") + nghttp2_strerror(id));
  i.widen_window(id);
  i.streams.emplace(id, st);
  impl* ip = &i;  // the hooks are cleared (detach_pipes) before the connection can go
  request->consumer = st.get();
  request->on_data = [ip, id] {
    if (ip->closed) return;
    auto s = ip->find(id);
    if (s && s->request_pipe && s->request_pipe->failed()) {
      ip->reset(id, NGHTTP2_CANCEL);  // the client gave up on its call
      return;
    }
    nghttp2_session_resume_data(ip->session.get(), id);
    ip->pump.notify();
  };
  response->on_consumed = [ip, id](std::size_t n) { ip->consume(id, n); };
  response->on_abandoned = [ip, id] { ip->reset(id, NGHTTP2_CANCEL); };
  i.pump.notify();

  while (!st->finished && !st->have_head) {
    auto cs = co_await net::this_coro::cancellation_state;
    if (cs.cancelled() != net::cancellation_type::none || clock::now() >= deadline) break;
    st->done.expires_at(deadline);
    co_await st->done.async_wait(use_tuple);
  }
  if (st->have_head) co_return std::move(st->response.head);
  if (!st->finished) {
    i.reset(id, NGHTTP2_CANCEL);
    i.detach_pipes(*st);
    co_return make_failure(failure_kind::timeout, "no response head by the deadline");
  }
  co_return std::move(st->fail).value_or(
      make_failure(failure_kind::protocol_error, "the stream ended without a response head"));
}

}  // namespace rebound::h2
