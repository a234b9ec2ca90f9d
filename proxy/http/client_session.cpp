#include "proxy/http/client_session.hpp"

#include "proxy/http/wire/bounded_parser.hpp"
#include "proxy/http/cancel_at.hpp"
#include "proxy/http/forward.hpp"
#include "proxy/http/tunnel.hpp"
#include "proxy/http/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/http/wire/framing.hpp"
#include "proxy/http/loop_guard.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/http/request_target.hpp"
#include "proxy/observe/correlation.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include <algorithm>
#include <array>

namespace rebound::http {
namespace {

/// Room in the client's read buffer beyond the head limit: one read (Beast reads up to
/// 64 KiB) plus a trailer section.
constexpr std::size_t read_slack = 64 * 1024 + 16 * 1024;
/// The first read of a request: most heads fit; the parser reads on if one does not.
constexpr std::size_t first_read = 4096;

/// A request head checked and routed, or the answer that refuses it.
struct vetted {
  std::optional<error_reply> refusal;
  bool keep_after_refusal = false;  ///< the connection may carry another request after the refusal
  bool is_connect = false;
  request_target target;
  dependency_route dependency;
};

/** Checks framing and target and finds the dependency. A plain function, so its
    temporaries stay off the session's coroutine frame, which lives as long as the
    connection. */
bool vet_request(vetted& v, const request_parser& parser, const config::config& cfg, std::string_view instance_token) {
  auto const& req = parser.get();
  if (auto problem = check_request_framing(req.base(), req.version())) {
    v.refusal = error_reply{problem->status, error_type::bad_request, problem->message, {}, 0};
    return false;
  }
  v.is_connect = req.method() == bhttp::verb::connect;
  auto target = v.is_connect ? parse_connect_target(req.target())
                             : parse_request_target(req.method_string(), req.target(), req[bhttp::field::host],
                                                    req.count(bhttp::field::host), req.version());
  if (!target.value) {
    v.refusal = error_reply{400, error_type::bad_request, target.error, {}, 0};
    return false;
  }
  v.target = std::move(*target.value);
  auto const& t = v.target;
  if (t.scheme == "https") {
    v.refusal = error_reply{400,
                            error_type::bad_request,
                            "https:// targets travel in a CONNECT tunnel; to have rebound retry them, call http:// "
                            "and configure the dependency's origin: https://...",
                            {},
                            0};
    v.keep_after_refusal = parser.is_done();
    return false;
  }
  if (auto loop = refuse_loop(t, via_names_instance(req.base(), instance_token), cfg.listen)) {
    v.refusal = std::move(loop);
    return false;
  }
  v.dependency = route_request(cfg, v.target, std::string_view(req.method_string().data(), req.method_string().size()),
                               v.is_connect);
  if (auto unknown = refuse_unknown_host(cfg, v.dependency, t)) {
    v.refusal = std::move(unknown);
    v.keep_after_refusal = parser.is_done();
    return false;
  }
  return true;
}

/** The same for a request on the inbound listener: whatever its Host, it goes to the app
    (`inbound.app`), the Host kept, as a dependency's `origin:` does it. */
bool vet_inbound_request(vetted& v, const request_parser& parser, const config::config& cfg,
                         std::string_view instance_token) {
  auto const& req = parser.get();
  if (auto problem = check_request_framing(req.base(), req.version())) {
    v.refusal = error_reply{problem->status, error_type::bad_request, problem->message, {}, 0};
    return false;
  }
  if (req.method() == bhttp::verb::connect) {
    v.refusal =
        error_reply{405, error_type::bad_request, "CONNECT is for the outbound proxy, not the app's listener", {}, 0};
    return false;
  }
  auto target = parse_request_target(req.method_string(), req.target(), req[bhttp::field::host],
                                     req.count(bhttp::field::host), req.version());
  if (!target.value) {
    v.refusal = error_reply{400, error_type::bad_request, target.error, {}, 0};
    return false;
  }
  v.target = std::move(*target.value);
  auto& t = v.target;
  t.scheme = "http";
  t.connect_host = cfg.inbound.app.host;
  t.port = cfg.inbound.app.port;
  if (auto loop = refuse_loop(t, via_names_instance(req.base(), instance_token), cfg.inbound.listen)) {
    v.refusal = std::move(loop);
    return false;
  }
  v.dependency = dependency_route{"inbound", &cfg.inbound.forward, nullptr, nullptr, nullptr, nullptr};
  return true;
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
bool request_waiting(const beast::flat_buffer& buffer, tcp::socket& socket) {
  if (buffer.size() > 0) return true;
  error_code ec;
  auto const n = socket.available(ec);
  return !ec && n > 0;
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
net::awaitable<void> serve_connect(const session_context& ctx, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                   const request_parser& parser, const vetted& v) {
  // Logged only: a tunnel's bytes are the client's, so an id rebound made goes nowhere.
  std::string made_id;
  auto correlation_id = correlation_id_of(parser.get());
  if (correlation_id.empty()) correlation_id = made_id = observe::new_correlation_id(*ctx.rng);
  tunnel_request const tunnel{v.target, v.dependency, correlation_id};
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
  client.socket().shutdown(tcp::socket::shutdown_send, ec);
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

net::awaitable<void> refuse_connection(tcp::socket socket) {
  beast::tcp_stream client(std::move(socket));
  error_code ignored;
  client.socket().set_option(tcp::no_delay(true), ignored);
  error_reply const full{503, error_type::overloaded, "too many client connections (limits.max_connections)", {}, 0, 1};
  co_await send_error(client, full, false, std::chrono::seconds(1));
  co_await lingering_close(client);
}

net::awaitable<void> run_client_session(session_context ctx, session_doors doors, tcp::socket socket) {
  connection_slot slot(ctx.open_connections);
  beast::tcp_stream client(std::move(socket));
  error_code ignored;
  client.socket().set_option(tcp::no_delay(true), ignored);
  session_guard guard(*ctx.sessions, client);
  beast::flat_buffer buffer;
  connection_deadline deadline(client.socket());
  bool first = doors.http2 != nullptr;

  for (;;) {
    // A drain ends a connection between requests, unless the next request has already
    // arrived: pipelined behind an answer whose head went out before the drain (so it could
    // not say Connection: close), or sent as the drain began. That one is answered, with
    // Connection: close; closing would drop it unanswered.
    if (ctx.sessions->draining() && !request_waiting(buffer, client.socket())) break;
    if (ctx.latest) ctx.running = *ctx.latest;
    auto const& cfg = ctx.cfg();
    auto const idle = cfg.limits.idle_timeout;
    guard.set_idle(true);
    request_parser parser;
    parser.header_limit(static_cast<std::uint32_t>(cfg.limits.max_request_head));
    // What the buffer may hold bounds a chunk-size line and a trailer section, which Beast
    // otherwise buffers without limit while it looks for their end.
    buffer.max_size(cfg.limits.max_request_head + read_slack);
    if (cfg.limits.max_request_body > 0)
      parser.body_limit(cfg.limits.max_request_body);
    else
      parser.body_limit(boost::none);
    // Waiting for a request is bounded by idle_timeout; once its first byte is here, the
    // rest of the head must follow within head_timeout (slow heads hold a slot each).
    if (buffer.size() == 0) {
      // An idle connection holds no read buffer: its room goes back between requests and is
      // taken again once bytes wait, as nginx does, so a thousand idle keep-alive clients do
      // not each keep the last request's. (Trying a read before waiting, to skip the wait
      // when a request is already here, measured slower: a keep-alive client's next request
      // is rarely here yet.)
      buffer.shrink_to_fit();
      deadline.arm(std::chrono::steady_clock::now() + idle);
      auto [wec] = co_await client.socket().async_wait(tcp::socket::wait_read, use_tuple);
      // Disarmed at once (the timer stays pending, lazily): the read below cannot wait, and
      // an HTTP/2 connection taken over next keeps its own deadlines.
      deadline.disarm();
      if (wec) break;  // idle timeout, or a drain closed it: no request started
      // Bytes wait: from here on a drain lets this request finish. Said before the read,
      // which takes them off the socket where the drain looks for them.
      guard.set_idle(false);
      // Bytes are there, so this read does not wait.
      client.expires_never();
      auto [rec, rn] = co_await client.async_read_some(buffer.prepare(first_read), use_tuple);
      buffer.commit(rn);
      if (rec) break;  // the client closed: no request started
    }
    if (first) {
      first = false;
      // Made first, then awaited: GCC 12 destroys a by-value argument inside a co_await twice.
      auto http2 = doors.http2(ctx, client, buffer, guard);
      if (co_await std::move(http2)) co_return;
    }
    // The head must be whole within head_timeout (then a 408), and a stalled one is dropped
    // at idle_timeout. A head already in the buffer, the common case, keeps only the idle
    // bound, which is later than the timer's pending wake-up and so costs nothing.
    client.expires_never();
    auto const now = std::chrono::steady_clock::now();
    auto const head_by = now + cfg.limits.head_timeout;
    bool const head_bound = head_incomplete(buffer) && head_by < now + idle;
    deadline.arm(head_bound ? head_by : now + idle);
    auto [ec, n] = co_await bhttp::async_read_header(client, buffer, parser, use_tuple);
    bool const head_late = head_bound && deadline.fired();
    deadline.disarm();
    guard.set_idle(false);
    if (ec) {
      co_await answer_unread_head(client, ec, head_late, idle);
      break;
    }
    vetted v;
    bool const vetted_ok = ctx.inbound ? vet_inbound_request(v, parser, cfg, ctx.instance_token)
                                       : vet_request(v, parser, cfg, ctx.instance_token);
    if (!vetted_ok) {
      co_await send_error(client, *v.refusal, v.keep_after_refusal, idle);
      if (!v.keep_after_refusal) break;
      continue;
    }
    auto const& t = v.target;
    attach_runtime(v.dependency, ctx, t);
    if (v.is_connect) {
      co_await serve_connect(ctx, client, buffer, parser, v);
      co_return;
    }
    client_request const request{ctx, client, buffer, parser, t, v.dependency};
    bool keep = false;
    if (doors.inbound)
      keep = co_await doors.inbound(request, guard);
    else
      keep = co_await forward(request, guard);
    if (!keep) break;
  }
  co_await lingering_close(client);
}

}  // namespace rebound::http
