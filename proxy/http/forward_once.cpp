#include "proxy/http/forward_once.hpp"
#include "proxy/plan/upstream_error.hpp"

#include "proxy/http/forward.hpp"
#include "proxy/runtime/session_registry.hpp"
#include "proxy/retry/concurrency_lane.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/wire/hop_by_hop.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/wire/wire_head.hpp"
#include "proxy/retry/request_timeout.hpp"
#include "proxy/retry/step.hpp"
#include "proxy/upstream/connect.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <optional>

namespace rebound::http {
namespace {

using namespace boost::asio::experimental::awaitable_operators;
using clock = std::chrono::steady_clock;
using response_parser = response_parser;

/// How long an upstream may stay silent after an `Expect: 100-continue` head before the
/// client is told to send its body anyway (curl waits 1 s itself).
constexpr std::chrono::milliseconds expect_wait{1000};

/// Everything an attempt's failure needs to produce the answer and the log line.
struct failure {
  unsigned status;
  error_type type;
  std::string message;
};

failure upstream_failure(const retry::attempt_failure& f) { return {default_status(f.type), f.type, f.message}; }

/// One request sent once: what its steps read, and what they learn on the way.
struct once_call {
  const client_request& r;
  const retry::request_facts& facts;
  std::string_view prefix;  ///< body already read from the client
  std::chrono::milliseconds idle;
  bool client_keep_alive;  ///< as the client asked, before the request was rewritten
  unsigned client_version;
  bool is_head;
  bool want_continue = false;  ///< Expect: 100-continue goes through
  clock::time_point body_start{};
  clock::time_point attempt_start{};  ///< set where the attempt begins, before the connect
  retry::concurrency_lane::slot slot{};
  bool sending = false;        ///< the request has begun to go out: the client connection cannot carry another
  bool body_skipped = false;   ///< the upstream answered before wanting the body
  bool body_relayed = false;   ///< the request's body went out to its end (its parser may be left mid-body)
  bool client_failed = false;  ///< the client, not the upstream, ended the exchange
  std::optional<error_reply> client_reply{};  ///< with client_failed: what to tell it, if anything

  /// Whether the client connection may carry another request: the client asked to keep it,
  /// its request was read whole, and no drain began.
  bool keepable() const {
    return client_keep_alive && (r.parser.is_done() || body_relayed) && !r.ctx.sessions->draining();
  }
};

/// The one attempt needs a slot in the concurrency limit like any other (issue 51); without
/// one it is answered here and nothing is sent.
net::awaitable<bool> refuse_at_limit(const once_call& c) {
  auto& guard = *c.r.route.guard;
  guard.limited();
  auto const f = retry::limited_failure(c.facts.dependency, 0);
  guard.answered(default_status(f.type));
  plan::log_upstream_error(c.r.ctx, c.facts, {to_string(f.type), default_status(f.type), 0, f.message});
  error_reply const reply{default_status(f.type),          f.type, f.message,
                          std::string(c.facts.dependency), 0,      default_retry_after_s(f.type)};
  // Nothing was sent; the body, unread, would have to be drained to keep the connection.
  bool const keep = c.keepable();
  co_await send_error(c.r.client, reply, keep, c.idle);
  co_return keep;
}

/// The attempt's outcome, for the slot's load measure, the breaker and the metrics.
void attempt_over(once_call& c, const retry::attempt_outcome& o) {
  c.slot.release(retry::measures_load(o.error));
  auto& guard = *c.r.route.guard;
  retry::record_attempt(guard, guard,
                        {1, o, std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - c.attempt_start)});
}

/** Expect: 100-continue once the head went out: waits briefly for the upstream's own 100 or
    early final answer (which then is the answer: `body_skipped`), else tells the client to go
    on. nullopt: go on (send the body, unless skipped). */
net::awaitable<std::optional<retry::attempt_failure>> exchange_continue(once_call& c, upstream::connection& up,
                                                                        upstream::exchange& ex,
                                                                        upstream::interim_route& interim,
                                                                        clock::time_point deadline) {
  auto const client_gone = retry::attempt_failure{error_type::bad_request, "the client ended the exchange"};
  // On TLS a readable socket may carry only a session ticket, and waiting on a TLS read could
  // not be abandoned cleanly, so a TLS upstream is not waited for: the client is told to go on.
  bool upstream_spoke = false;
  if (!up.is_tls()) {
    net::steady_timer timer(co_await net::this_coro::executor);
    timer.expires_at(std::min(clock::now() + expect_wait, deadline));
    auto readable = up.socket().async_wait(tcp_socket::wait_read, use_tuple);
    auto expire = timer.async_wait(use_tuple);
    auto spoke = co_await (std::move(readable) || std::move(expire));
    upstream_spoke = spoke.index() == 0;
  }
  if (upstream_spoke) {
    interim.stop_at_100 = true;
    auto failed = co_await upstream::read_final_head(ex, c.is_head, deadline, interim);
    interim.stop_at_100 = false;
    if (failed) co_return failed;
    if (!interim.client) {  // the client left before its 100
      c.client_failed = true;
      co_return client_gone;
    }
    // A 100 read here went to the client already; a final status instead means the upstream
    // refused the body, and is the answer.
    if (interim.sent_100) {
      ex.response.reset();
    } else if (ex.response->get().result_int() >= 200) {
      c.body_skipped = true;
      co_return std::nullopt;
    }
  }
  if (!interim.sent_100) {
    if (!co_await send_continue(c.r.client, c.idle)) {
      c.client_failed = true;
      co_return client_gone;
    }
    interim.sent_100 = true;
  }
  co_return std::nullopt;
}

/** How this request goes out on the connection the exchange opened (upstream::request_sender):
    the head, then the Expect: 100-continue exchange if asked for, then the body relayed as it
    arrives. A slow upload stretches the attempt's deadline, never the caller's own. */
net::awaitable<std::optional<retry::attempt_failure>> send_request(once_call& c, upstream::connection& up,
                                                                   upstream::exchange& ex,
                                                                   upstream::interim_route& interim,
                                                                   clock::time_point& deadline) {
  c.sending = true;
  auto& head = ex.head_text;
  head.clear();
  append_head(head, c.r.parser.get().base());
  if (c.want_continue) {
    up.expires_at(deadline);
    auto [ec, n] = co_await net::async_write(up, net::buffer(head), use_tuple);
    head.clear();
    if (ec)
      co_return retry::attempt_failure{upstream::classify_connect_error(ec),
                                       "sending the request failed: " + ec.message()};
    auto failed = co_await exchange_continue(c, up, ex, interim, deadline);
    if (failed || c.body_skipped) co_return failed;
  }
  auto const upload_start = clock::now();
  auto const pace = pace_of(c.r.ctx.cfg(), c.body_start);
  relay_pacing const how{c.idle, c.r.ctx.buffers, &pace};
  auto rr = co_await relay_request_body({c.r.client, c.r.buffer, c.r.parser}, up, head, c.prefix, how);
  deadline += clock::now() - upload_start;
  // The caller's own deadline (X-Request-Timeout) does not stretch for a slow upload.
  if (c.facts.deadline) deadline = std::min(deadline, *c.facts.deadline);
  if (rr.read_error) {
    c.client_failed = true;
    c.client_reply = body_read_refusal(rr.read_error, c.r.parser);
    co_return retry::attempt_failure{error_type::bad_request, "the client ended the exchange"};
  }
  if (rr.write_error)
    co_return retry::attempt_failure{upstream::classify_connect_error(rr.write_error),
                                     "sending the request body failed: " + rr.write_error.message()};
  c.body_relayed = true;
  co_return std::nullopt;
}

/// No answer came: the client's own failure answered (if anyone is left to answer), or the
/// upstream's in the one error shape.
net::awaitable<bool> answer_failure(once_call& c, const retry::attempt_failure& f) {
  auto const& dependency = c.facts.dependency;
  if (c.client_failed) {
    if (c.client_reply) {
      c.client_reply->dependency = std::string(dependency);
      co_await send_error(c.r.client, *c.client_reply, false, c.idle);
    }
    co_return false;
  }
  // Refused before a byte went out (no credential, no connection): the client's request was
  // read whole, so its connection can carry the next one.
  bool const keep = !c.sending && c.keepable();
  auto const failed = upstream_failure(f);
  attempt_over(c, {std::nullopt, failed.type});
  c.r.route.guard->answered(failed.status);
  plan::log_upstream_error(c.r.ctx, c.facts, {to_string(failed.type), failed.status, 1, failed.message});
  error_reply const reply{failed.status, failed.type, failed.message, std::string(dependency), 1};
  co_await send_error(c.r.client, reply, keep, c.idle);
  co_return keep;
}

/// The upstream's answer, relayed to the client as it arrives; its connection pooled after
/// when it can carry another request.
net::awaitable<bool> relay_answer(once_call& c, upstream::exchange& ex, const std::string& key) {
  auto& rp = ex.response;
  auto& res = rp->get();
  attempt_over(c, {res.result_int(), std::nullopt});
  c.r.route.guard->answered(res.result_int());
  bool const upstream_keep_alive = rp->keep_alive();
  client_side const to_client{c.is_head, c.client_version, c.keepable(), 1};
  bool const client_keep_alive = prepare_client_response(*rp, to_client);
  auto& head = ex.head_text;  // the request's went out: no attempt follows
  head.clear();
  append_head(head, *rp);
  relay_pacing const how{c.idle, c.r.ctx.buffers};
  auto rr = co_await relay_response_body({*ex.stream, ex.buffer, *rp}, c.r.client, head, how);
  if (!rr.ok()) {
    if (rr.read_error)
      plan::log_upstream_error(
          c.r.ctx, c.facts, {"upstream_protocol_error", 0, 1, "response body cut short: " + rr.read_error.message()});
    co_return false;  // the client saw a partial response: only a close tells it so
  }
  if (upstream_keep_alive && !c.body_skipped && ex.buffer.size() == 0) {
    ex.stream->expires_never();
    c.r.ctx.pool->put(key, std::move(*ex.stream));
  }
  co_return client_keep_alive;
}

}  // namespace

net::awaitable<bool> forward_once(const client_request& r, const retry::request_facts& facts, std::string_view prefix) {
  auto& req = r.parser.get();
  once_call c{r,
              facts,
              prefix,
              r.ctx.cfg().limits.idle_timeout,
              req.keep_alive(),
              req.version(),
              req.method() == bhttp::verb::head};
  if (r.route.slots && !(c.slot = r.route.slots->take()).held()) co_return co_await refuse_at_limit(c);

  // Expect: 100-continue is end-to-end: forwarded, and answered per RFC 9110 section 10.1.1.
  // (Any other expectation was refused with 417 before the request got here.)
  c.want_continue = c.client_version >= 11 && !r.parser.is_done() && req.count(bhttp::field::expect) > 0;
  if (!c.want_continue) req.erase(bhttp::field::expect);
  prepare_upstream_request(req, r.parser, r.target, r.ctx.instance_token);
  c.body_start = clock::now();
  auto const key = pool_key(r.target, r.route.tls);

  // A fresh connection, never a pooled one: this request cannot be sent a second time (its
  // body streams through once, or R-6 forbids a repeat), and a pooled connection can turn
  // out dead only once the request is on it, when the upstream may have processed it.
  interim_to_client interim_out{r.client, c.idle};
  auto to = destination_of(r.route, r.target, key, req);
  to.may_reuse = false;
  to.interim_to = c.client_version >= 11 ? &interim_out : nullptr;
  to.pass_100 = c.want_continue;
  c.attempt_start = clock::now();
  auto attempt_deadline = c.attempt_start + r.route.policy->attempt_timeout;
  if (facts.deadline) {
    attempt_deadline = std::min(attempt_deadline, *facts.deadline);
    req.set(retry::request_timeout_header, retry::format_request_timeout(attempt_deadline, c.attempt_start));
  }
  upstream::request_sender const send = [&c](upstream::connection& up, upstream::exchange& ex,
                                             upstream::interim_route& interim, clock::time_point& deadline) {
    return send_request(c, up, ex, interim, deadline);
  };
  upstream::outgoing_request const out{req, {}, c.is_head};
  auto attempt = co_await upstream::run_attempt(*r.ctx.pool, to, out, send, attempt_deadline);
  if (!attempt) co_return co_await answer_failure(c, attempt.error());
  co_return co_await relay_answer(c, **attempt, key);
}

}  // namespace rebound::http
