#include "proxy/http/forward_once.hpp"

#include "proxy/http/forward.hpp"
#include "proxy/http/session_registry.hpp"
#include "proxy/retry/concurrency_lane.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/http/wire/hop_by_hop.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/http/wire/wire_head.hpp"
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

}  // namespace

net::awaitable<bool> forward_once(const client_request& r, const retry::request_facts& facts, std::string_view prefix) {
  auto const& ctx = r.ctx;
  auto& client = r.client;
  auto& buffer = r.buffer;
  auto& parser = r.parser;
  auto const& target = r.target;
  auto const& route = r.route;
  auto const& policy = *route.policy;
  auto& guard = *route.guard;
  auto& req = parser.get();
  auto const idle = ctx.cfg().limits.idle_timeout;
  bool const client_wants_keep_alive = req.keep_alive();
  unsigned const client_version = req.version();
  bool const is_head = req.method() == bhttp::verb::head;
  std::string_view const dependency = facts.dependency;

  // The one attempt needs a slot in the concurrency limit like any other (issue 51).
  retry::concurrency_lane::slot slot;
  if (route.slots && !(slot = route.slots->take()).held()) {
    guard.limited();
    auto const f = retry::limited_failure(dependency, 0);
    guard.answered(default_status(f.type));
    log_upstream_error(ctx, facts, {to_string(f.type), default_status(f.type), 0, f.message});
    error_reply const reply{default_status(f.type), f.type, f.message, std::string(dependency), 0,
                            default_retry_after_s(f.type)};
    // Nothing was sent; the body, unread, would have to be drained to keep the connection.
    bool const keep = client_wants_keep_alive && parser.is_done() && !ctx.sessions->draining();
    co_await send_error(client, reply, keep, idle);
    co_return keep;
  }

  clock::time_point attempt_start;  // set where the attempt begins, before the connect
  auto attempt_over = [&](const retry::attempt_outcome& o) {
    slot.release(retry::measures_load(o.error));
    retry::record_attempt(guard, guard,
                          {1, o, std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - attempt_start)});
  };
  auto fail = [&](const failure& f) {
    attempt_over({std::nullopt, f.type});
    guard.answered(f.status);
    log_upstream_error(ctx, facts, {to_string(f.type), f.status, 1, f.message});
    return error_reply{f.status, f.type, f.message, std::string(dependency), 1};
  };

  // Expect: 100-continue is end-to-end: forwarded, and answered per RFC 9110 section 10.1.1.
  // (Any other expectation was refused with 417 before the request got here.)
  bool const want_continue = client_version >= 11 && !parser.is_done() && req.count(bhttp::field::expect) > 0;
  if (!want_continue) req.erase(bhttp::field::expect);
  prepare_upstream_request(req, parser, target, ctx.instance_token);

  auto const body_start = clock::now();
  auto const key = pool_key(target, route.tls);
  bool sending = false;        // the request has begun to go out: the client connection cannot carry another
  bool body_skipped = false;   // the upstream answered before wanting the body
  bool client_failed = false;  // the client, not the upstream, ended the exchange
  std::optional<error_reply> client_reply;  // with client_failed: what to tell it, if anything

  // How this request goes out on the connection the exchange opened: the head, then the
  // Expect: 100-continue exchange if asked for, then the body relayed as it arrives.
  upstream::request_sender const send =
      [&](upstream::connection& up, upstream::exchange& ex, upstream::interim_route& interim,
          clock::time_point& deadline) -> net::awaitable<std::optional<retry::attempt_failure>> {
    sending = true;
    auto const client_gone = retry::attempt_failure{error_type::bad_request, "the client ended the exchange"};
    std::string head;
    append_head(head, req.base());
    if (want_continue) {
      up.expires_at(deadline);
      auto [ec, n] = co_await net::async_write(up, net::buffer(head), use_tuple);
      head.clear();
      if (ec)
        co_return retry::attempt_failure{upstream::classify_connect_error(ec),
                                         "sending the request failed: " + ec.message()};
      // Wait briefly for the upstream's own 100 or early final answer. On TLS a readable
      // socket may carry only a session ticket, and waiting on a TLS read could not be
      // abandoned cleanly, so a TLS upstream is not waited for: the client is told to go on.
      bool upstream_spoke = false;
      if (!up.is_tls()) {
        net::steady_timer timer(co_await net::this_coro::executor);
        timer.expires_at(std::min(clock::now() + expect_wait, deadline));
        auto readable = up.socket().async_wait(tcp::socket::wait_read, use_tuple);
        auto expire = timer.async_wait(use_tuple);
        auto spoke = co_await (std::move(readable) || std::move(expire));
        upstream_spoke = spoke.index() == 0;
      }
      if (upstream_spoke) {
        interim.stop_at_100 = true;
        auto failed = co_await upstream::read_final_head(ex, is_head, deadline, interim);
        interim.stop_at_100 = false;
        if (failed) co_return failed;
        if (!interim.client) {  // the client left before its 100
          client_failed = true;
          co_return client_gone;
        }
        // A 100 read here went to the client already; a final status instead means the
        // upstream refused the body, and is the answer.
        if (interim.sent_100) {
          ex.response.reset();
        } else if (ex.response->get().result_int() >= 200) {
          body_skipped = true;
          co_return std::nullopt;
        }
      }
      if (!interim.sent_100) {
        if (!co_await send_continue(client, idle)) {
          client_failed = true;
          co_return client_gone;
        }
        interim.sent_100 = true;
      }
    }
    auto const upload_start = clock::now();
    auto const pace = pace_of(ctx.cfg(), body_start);
    relay_pacing const how{idle, ctx.buffers, &pace};
    auto rr = co_await relay_request_body({client, buffer, parser}, up, head, prefix, how);
    deadline += clock::now() - upload_start;
    // The caller's own deadline (X-Request-Timeout) does not stretch for a slow upload.
    if (facts.deadline) deadline = std::min(deadline, *facts.deadline);
    if (rr.read_error) {
      client_failed = true;
      client_reply = body_read_refusal(rr.read_error, parser);
      co_return client_gone;
    }
    if (rr.write_error)
      co_return retry::attempt_failure{upstream::classify_connect_error(rr.write_error),
                                       "sending the request body failed: " + rr.write_error.message()};
    co_return std::nullopt;
  };

  // A fresh connection, never a pooled one: this request cannot be sent a second time (its
  // body streams through once, or R-6 forbids a repeat), and a pooled connection can turn
  // out dead only once the request is on it, when the upstream may have processed it.
  interim_to_client interim_out{client, idle};
  auto to = destination_of(route, target, key, req);
  to.may_reuse = false;
  to.interim_to = client_version >= 11 ? &interim_out : nullptr;
  to.pass_100 = want_continue;
  attempt_start = clock::now();
  auto attempt_deadline = attempt_start + policy.attempt_timeout;
  if (facts.deadline) {
    attempt_deadline = std::min(attempt_deadline, *facts.deadline);
    req.set(retry::request_timeout_header, retry::format_request_timeout(attempt_deadline, attempt_start));
  }
  upstream::outgoing_request const out{req, {}, is_head};
  auto attempt = co_await upstream::run_attempt(*ctx.pool, to, out, send, attempt_deadline);
  if (!attempt) {
    if (client_failed) {
      if (client_reply) {
        client_reply->dependency = std::string(dependency);
        co_await send_error(client, *client_reply, false, idle);
      }
      co_return false;
    }
    // Refused before a byte went out (no credential, no connection): the client's request was
    // read whole, so its connection can carry the next one.
    bool const keep = !sending && client_wants_keep_alive && parser.is_done() && !ctx.sessions->draining();
    error_reply const reply = fail(upstream_failure(attempt.error()));
    co_await send_error(client, reply, keep, idle);
    co_return keep;
  }
  auto& ex = **attempt;
  auto& rp = ex.response;
  auto& up = ex.stream;
  auto& ubuf = ex.buffer;

  auto& res = rp->get();
  attempt_over({res.result_int(), std::nullopt});
  guard.answered(res.result_int());
  bool const upstream_keep_alive = rp->keep_alive();
  client_side const to_client{is_head, client_version,
                              client_wants_keep_alive && parser.is_done() && !ctx.sessions->draining(), 1};
  bool const client_keep_alive = prepare_client_response(res, *rp, to_client);
  std::string head;
  append_head(head, res.base());
  relay_pacing const how{idle, ctx.buffers};
  auto rr = co_await relay_response_body({*up, ubuf, *rp}, client, head, how);
  if (!rr.ok()) {
    if (rr.read_error)
      log_upstream_error(ctx, facts,
                         {"upstream_protocol_error", 0, 1, "response body cut short: " + rr.read_error.message()});
    co_return false;  // the client saw a partial response: only a close tells it so
  }
  if (upstream_keep_alive && !body_skipped && ubuf.size() == 0) {
    up->expires_never();
    ctx.pool->put(key, std::move(*up));
  }
  co_return client_keep_alive;
}

}  // namespace rebound::http
