#include "proxy/http/client_session.hpp"

#include "proxy/wire/bounded_parser.hpp"
#include "proxy/http/cancel_at.hpp"
#include "proxy/http/forward.hpp"
#include "proxy/http/tunnel.hpp"
#include "proxy/runtime/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/wire/framing.hpp"
#include "proxy/plan/locate.hpp"
#include "proxy/plan/loop_guard.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/plan/request_plan.hpp"
#include "proxy/plan/request_target.hpp"
#include "proxy/observe/correlation.hpp"
#include "proxy/observe/log.hpp"

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include <algorithm>
#include <array>
#include <memory>

namespace rebound::http {
namespace {

/// Room in the client's read buffer beyond the head limit: one read (Beast reads up to
/// 64 KiB) plus a trailer section.
constexpr std::size_t read_slack = 64 * 1024 + 16 * 1024;
/// The first read of a request: most heads fit; the parser reads on if one does not.
constexpr std::size_t first_read = 4096;

/** Checks framing, then locates the request on the listener it came to (plan/locate.hpp:
    target, loop, route, unknown host). A plain function, so its temporaries stay off the
    session's coroutine frame, which lives as long as the connection. */
bool vet_request(plan::located& v, const request_parser& parser, const config::config& cfg,
                 std::string_view instance_token, plan::listener where) {
  auto const& req = parser.get();
  if (auto problem = check_request_framing(req.base(), req.version())) {
    v.refusal = error_reply{problem->status, error_type::bad_request, problem->message, {}, 0};
    return false;
  }
  auto const view = [](boost::core::string_view s) { return std::string_view(s.data(), s.size()); };
  plan::target_in const in{
      view(req.method_string()),     view(req.target()), view(req[bhttp::field::host]),
      req.count(bhttp::field::host), req.version(),      plan::via_names_instance(req.base(), instance_token)};
  plan::locate(v, in, where, cfg);
  return !v.refusal;
}

/// The answer to a request head Beast refused, or nullopt when there is nobody to answer.
std::optional<error_reply> reply_for_read_error(const error_code& ec) {
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow)
    return error_reply{431, error_type::bad_request, "request head too large", {}, 0};
  if (ec == bhttp::error::body_limit) return error_reply{413, error_type::bad_request, "request body too large", {}, 0};
  if (ec == bhttp::error::partial_message) return std::nullopt;  // the client went away mid-head
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category())
    return error_reply{400, error_type::bad_request, "malformed request: " + ec.message(), {}, 0};
  return std::nullopt;  // timeout, reset, abort: no one is listening
}

/// Whether `buffer` lacks the blank line that ends a request head (so reading it may wait).
bool head_incomplete(const beast::flat_buffer& buffer) {
  auto const d = buffer.data();
  std::string_view const bytes(static_cast<const char*>(d.data()), d.size());
  return bytes.find("\r\n\r\n") == std::string_view::npos;
}

/// Whether the client's next request has begun to arrive: bytes already read into `buffer`
/// (pipelined), or bytes waiting unread in the socket.
bool request_waiting(const beast::flat_buffer& buffer, tcp_socket& socket) {
  return buffer.size() > 0 || has_unread_bytes(socket);
}

// The two coroutines below hold what only an error or a CONNECT needs. In the session's
// frame they would be held by every keep-alive connection for its whole life: GCC gives each
// local of a coroutine its own place in the frame, whichever branch declares it.

/// Answers a request head that could not be read: too late (408), too large, malformed;
/// nothing when the client went away.
net::awaitable<void> answer_unread_head(beast::tcp_stream& client, error_code ec, bool head_late,
                                        std::chrono::milliseconds idle) {
  if (head_late) {
    // Named, not a temporary in the co_await expression: GCC 12 frees such temporaries twice.
    error_reply const late{408, error_type::bad_request, "request head not complete within limits.head_timeout", {}, 0};
    co_await send_error(client, late, false, idle);
  } else if (auto reply = reply_for_read_error(ec)) {
    co_await send_error(client, *reply, false, idle);
  }
}

/// A CONNECT: the connection becomes a tunnel, for good.
net::awaitable<void> serve_connect(const runtime::session_context& ctx, beast::tcp_stream& client,
                                   beast::flat_buffer& buffer, const request_parser& parser, const plan::located& v) {
  // Logged only: a tunnel's bytes are the client's, so an id rebound made goes nowhere.
  observe::made_correlation_id made_id;
  auto correlation_id = plan::correlation_id_of(plan::fields_view(parser.get().base()));
  if (correlation_id.empty()) correlation_id = (made_id = observe::new_correlation_id(*ctx.rng)).view();
  tunnel_request const tunnel{v.target, v.route, correlation_id};
  co_await run_tunnel(ctx, client, buffer, tunnel);
}

/// Counts a client connection for limits.max_connections while it lives.
class connection_slot {
 public:
  explicit connection_slot(std::atomic<std::size_t>* count) : count_(count) {
    if (count_) count_->fetch_add(1, std::memory_order_relaxed);
  }
  ~connection_slot() {
    if (count_) count_->fetch_sub(1, std::memory_order_relaxed);
  }
  connection_slot(const connection_slot&) = delete;
  connection_slot& operator=(const connection_slot&) = delete;

 private:
  std::atomic<std::size_t>* count_;
};

}  // namespace

/** Half-closes, then reads and drops what the client still sends for a moment before
    closing: closing with unread bytes makes the kernel send a reset, which can destroy an
    error answer the client has not read yet (the reason for nginx's lingering_close). */
net::awaitable<void> lingering_close(beast::tcp_stream& client) {
  error_code ec;
  client.socket().shutdown(tcp_socket::shutdown_send, ec);
  if (!ec && client.socket().is_open()) {
    std::array<char, 4096> sink;
    std::size_t total = 0;
    client.expires_after(std::chrono::seconds(1));
    while (total < (1u << 20)) {
      auto [rec, n] = co_await client.async_read_some(net::buffer(sink), use_tuple);
      if (rec) break;
      total += n;
    }
  }
  client.close();
}

net::awaitable<void> refuse_connection(tcp_socket socket) {
  beast::tcp_stream client(std::move(socket));
  error_code ignored;
  client.socket().set_option(tcp::no_delay(true), ignored);
  error_reply const full{503, error_type::overloaded, "too many client connections (limits.max_connections)", {}, 0, 1};
  co_await send_error(client, full, false, std::chrono::seconds(1));
  co_await lingering_close(client);
}

namespace {

/** A client connection for its whole life, whether a session coroutine serves it or it waits
    parked for its next bytes. On the heap once per connection, so the registry's pointer to
    its stream and the deadline's to its socket stay valid across both states. */
struct client_connection {
  client_connection(runtime::session_context c, session_doors d, tcp_socket s)
      : ctx(std::move(c)),
        doors(d),
        slot(ctx.open_connections),
        stream(std::move(s)),
        guard(*ctx.sessions, stream),
        deadline(stream.socket()),
        first(doors.http2 != nullptr) {}
  runtime::session_context ctx;
  session_doors doors;
  connection_slot slot;
  beast::tcp_stream stream;
  runtime::session_guard guard;
  beast::flat_buffer buffer;
  connection_deadline deadline;
  bool first;  ///< no byte read yet: they may be HTTP/2's preface
};
using connection_ptr = std::unique_ptr<client_connection>;

net::awaitable<void> serve_requests(connection_ptr conn);

/// Takes the worker's current config for what comes next, if a reload changed it; a request
/// in flight keeps the one it started with.
void take_latest_config(runtime::session_context& ctx) {
  if (ctx.latest && ctx.running != *ctx.latest) ctx.running = *ctx.latest;
}

/** Waits for the connection's next bytes holding no coroutine and no read buffer: the
    socket, its idle deadline (`idle_end`) and the record above. The buffer's room is taken
    again once bytes wait, as nginx does. A session starts when bytes arrive; the idle timeout
    or a drain closes the socket, which ends the wait and frees the record. */
void park(connection_ptr conn, std::chrono::steady_clock::time_point idle_end) {
  auto& c = *conn;
  c.guard.set_idle(true);
  c.buffer.shrink_to_fit();
  // The drain signal keeps the memory of the last wait it could cancel (Asio reuses it for
  // the next): 48 bytes made while the request was served, amid its freed frames and
  // buffers, which then pinned a page of them per idle connection (bench/README.md).
  c.guard.drain_slot().clear();
  c.deadline.arm(idle_end);
  // Pending while the connection idles: its own size from malloc (net.hpp).
  auto on_bytes = [conn = std::move(conn)](error_code ec) mutable {
    // Disarmed at once (the timer stays pending, lazily): the session's first read cannot
    // wait, and an HTTP/2 connection taken over keeps its own deadlines.
    conn->deadline.disarm();
    if (ec) return;  // the idle timeout or a drain closed it: no request started
    // Bytes wait: from here on a drain lets this request finish. Said before the session's
    // read takes them off the socket, where the drain looks for them.
    conn->guard.set_idle(false);
    auto ex = conn->stream.get_executor();
    auto const* log = conn->ctx.log;
    net::co_spawn(ex, serve_requests(std::move(conn)), observe::report_failure{log, "client_session"});
  };
  c.stream.socket().async_wait(tcp_socket::wait_read,
                               net::bind_allocator(exact_allocator<void>(), std::move(on_bytes)));
}

/** How long a session waits for the next request in its coroutine before it parks. A busy
    client's next request comes sooner and finds the session still there, so it pays nothing
    (a park and a new session are about five allocations more per request, bench/README.md);
    an idle one gives the coroutine's frames back after this. */
constexpr std::chrono::seconds park_after{1};

/// Where waiting for the next request begins: parked at once, or in the session for a moment.
struct idle_wait {
  std::chrono::steady_clock::time_point idle_end;
  bool park_now;
};

/** Starts the wait for the next request. Plain functions, these two: their temporaries stay
    off the session's coroutine frame. */
idle_wait begin_idle_wait(client_connection& c) {
  take_latest_config(c.ctx);
  auto const now = std::chrono::steady_clock::now();
  auto const idle_end = now + c.ctx.cfg().limits.idle_timeout;
  if (now + park_after >= idle_end) return {idle_end, true};
  // The read that waits keeps the first read's room for the moment; whatever a large head or
  // a pipelined burst grew it to goes back first.
  if (c.buffer.capacity() > first_read) c.buffer.shrink_to_fit();
  c.deadline.arm(now + park_after);
  return {idle_end, false};
}

/// How reading a request head began.
struct head_start {
  error_code ec;  ///< need_more: the head is not whole in the buffer, so a read follows
  bool bounded;   ///< the deadline armed is head_timeout's (a 408 when it passes), not idle_timeout's
};

/** Takes the latest config, bounds the parser and the buffer by it, arms the head's deadline,
    and parses a head already in the buffer: most came whole with the read that woke the
    session, and need no read of their own (parse_buffered). */
head_start begin_head_read(client_connection& c, request_parser& parser) {
  take_latest_config(c.ctx);
  auto const& cfg = c.ctx.cfg();
  parser.header_limit(static_cast<std::uint32_t>(cfg.limits.max_request_head));
  // What the buffer may hold bounds a chunk-size line and a trailer section, which Beast
  // otherwise buffers without limit while it looks for their end.
  c.buffer.max_size(cfg.limits.max_request_head + read_slack);
  if (cfg.limits.max_request_body > 0)
    parser.body_limit(cfg.limits.max_request_body);
  else
    parser.body_limit(boost::none);
  // A stalled head is dropped at idle_timeout. A head already in the buffer, the common
  // case, keeps only the idle bound, which is later than the timer's pending wake-up and so
  // costs nothing.
  c.stream.expires_never();
  auto const now = std::chrono::steady_clock::now();
  auto const head_by = now + cfg.limits.head_timeout;
  auto const idle_by = now + cfg.limits.idle_timeout;
  bool const head_bound = head_incomplete(c.buffer) && head_by < idle_by;
  c.deadline.arm(head_bound ? head_by : idle_by);
  return {parse_buffered(c.buffer, parser), head_bound};
}

enum class after_wait { serve, park, close };

/** Where a session goes when its read for the next request ended without bytes: the moment
    passed (`quiet`), so it parks for the rest of the idle timeout; a drain began, and a
    request already waits in the socket, so it serves that one; or the client closed, or a
    drain began with nothing waiting, so it closes. */
after_wait after_quiet_read(client_connection& c, error_code ec, bool quiet) {
  bool const cancelled = ec == net::error::operation_aborted;
  bool const draining = c.ctx.sessions->draining();
  if (cancelled && draining && request_waiting(c.buffer, c.stream.socket())) return after_wait::serve;
  if (cancelled && quiet && !draining) return after_wait::park;
  return after_wait::close;
}

/** Serves requests while they keep coming: a request already read past the last one's end
    (pipelined) is served at once, otherwise the connection parks again and this coroutine
    ends, so its frame (the parser, the routed target) is not held between requests. */
net::awaitable<void> serve_requests(connection_ptr conn) {
  auto& c = *conn;
  auto& client = c.stream;
  auto& buffer = c.buffer;
  for (bool woken = true;; woken = false) {
    // A drain ends a connection between requests, unless the next request has already
    // arrived: pipelined behind an answer whose head went out before the drain (so it could
    // not say Connection: close), or sent as the drain began. That one is answered, with
    // Connection: close; closing would drop it unanswered.
    if (c.ctx.sessions->draining() && !request_waiting(buffer, client.socket())) break;
    if (buffer.size() == 0 && !woken) {
      auto const wait = begin_idle_wait(c);
      if (wait.park_now) {
        park(std::move(conn), wait.idle_end);
        co_return;
      }
      // A read, not a wait: Asio re-arms epoll (epoll_ctl) for each wait; a read queued after
      // one that drained the socket costs no syscall until bytes come (bench/README.md). A
      // drain cancels it; a request already read or waiting is answered, Connection: close.
      auto [rec, rn] = co_await client.socket().async_read_some(
          buffer.prepare(first_read), net::bind_cancellation_slot(c.guard.drain_slot(), use_tuple));
      bool const quiet = c.deadline.fired();
      c.deadline.disarm();
      buffer.commit(rn);
      if (auto const next = rec ? after_quiet_read(c, rec, quiet) : after_wait::serve; next == after_wait::park) {
        park(std::move(conn), wait.idle_end);
        co_return;
      } else if (next == after_wait::close) {
        co_return;
      }
      woken = buffer.size() == 0;  // a drain found its request in the socket: read below
    }
    if (buffer.size() == 0 && woken) {
      // Bytes wait (the park woke on them), so this read does not.
      client.expires_never();
      auto [rec, rn] = co_await client.async_read_some(buffer.prepare(first_read), use_tuple);
      buffer.commit(rn);
      if (rec) break;  // the client closed: no request started
    }
    if (c.first) {
      c.first = false;
      // Made first, then awaited: GCC 12 destroys a by-value argument inside a co_await twice.
      auto http2 = c.doors.http2(c.ctx, client, buffer, c.guard);
      if (co_await std::move(http2)) co_return;
    }
    request_parser parser;
    auto head = begin_head_read(c, parser);
    auto const& cfg = c.ctx.cfg();
    auto const idle = cfg.limits.idle_timeout;
    if (head.ec == bhttp::error::need_more) {
      auto [ec, n] = co_await bhttp::async_read_header(client, buffer, parser, use_tuple);
      head.ec = ec;
    }
    c.deadline.disarm();
    if (head.ec) {
      co_await answer_unread_head(client, head.ec, head.bounded && c.deadline.fired(), idle);
      break;
    }
    plan::located v;
    if (!vet_request(v, parser, cfg, c.ctx.instance_token,
                     c.ctx.inbound ? plan::listener::inbound : plan::listener::proxy)) {
      bool const keep_after = v.refusal_keeps_connection && parser.is_done();
      co_await send_error(client, *v.refusal, keep_after, idle);
      if (!keep_after) break;
      continue;
    }
    auto const& t = v.target;
    plan::attach_runtime(v.route, c.ctx, t);
    if (v.is_connect) {
      co_await serve_connect(c.ctx, client, buffer, parser, v);
      co_return;
    }
    client_request const request{c.ctx, client, buffer, parser, t, v.route};
    bool keep = false;
    if (c.doors.inbound)
      keep = co_await c.doors.inbound(request, c.guard);
    else
      keep = co_await forward(request, c.guard);
    if (!keep) break;
  }
  co_await lingering_close(client);
}

}  // namespace

void serve_client(runtime::session_context ctx, session_doors doors, tcp_socket socket) {
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  auto conn = std::make_unique<client_connection>(std::move(ctx), doors, std::move(socket));
  take_latest_config(conn->ctx);
  auto const idle_end = std::chrono::steady_clock::now() + conn->ctx.cfg().limits.idle_timeout;
  park(std::move(conn), idle_end);
}

}  // namespace rebound::http
