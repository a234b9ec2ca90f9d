#include "proxy/http/forward_once.hpp"

#include "proxy/http/forward.hpp"
#include "proxy/http/hop_by_hop.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/retry/classify.hpp"
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

failure upstream_failure(const upstream::attempt_failure& f) { return {default_status(f.type), f.type, f.message}; }

}  // namespace

net::awaitable<bool> forward_once(const session_context& ctx, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                  request_parser& parser, const request_target& target,
                                  const retry::request_facts& facts, const dependency_route& route,
                                  std::string_view prefix) {
  auto const& policy = *route.policy;
  auto& guard = *route.guard;
  auto& req = parser.get();
  auto const idle = ctx.cfg().limits.idle_timeout;
  bool const client_wants_keep_alive = req.keep_alive();
  unsigned const client_version = req.version();
  bool const is_head = req.method() == bhttp::verb::head;
  std::string_view const dependency = facts.dependency;

  clock::time_point attempt_start;  // set where the attempt begins, before the connect
  auto attempt_over = [&](const retry::attempt_outcome& o) {
    guard.record(retry::classify(o, retry::retry_on::r4_default()) == retry::verdict::retryable);
    guard.attempt_done({1, o, std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - attempt_start)});
  };
  auto fail = [&](const failure& f) {
    attempt_over({std::nullopt, f.type});
    guard.answered(f.status);
    log_upstream_error(ctx, facts, to_string(f.type), f.status, 1, f.message);
    return error_reply{f.status, f.type, f.message, std::string(dependency), 1};
  };

  // Expect: 100-continue is end-to-end: forwarded, and answered per RFC 9110 section 10.1.1.
  bool want_continue = false;
  if (auto it = req.find(bhttp::field::expect); it != req.end()) {
    if (client_version >= 11 && !beast::iequals(it->value(), "100-continue")) {
      error_reply const reply{417, error_type::bad_request, "only Expect: 100-continue is supported", {}, 0};
      co_await send_error(client, reply, false, idle);
      co_return false;
    }
    want_continue = client_version >= 11 && !parser.is_done();
    if (!want_continue) req.erase(bhttp::field::expect);
  }
  prepare_upstream_request(req, parser, target, ctx.instance_token);

  auto const body_start = clock::now();
  auto const key = pool_key(target);
  auto* const tls = route.tls;
  auto* const creds = credentials_for(req, route);
  attempt_start = clock::now();
  auto deadline = attempt_start + policy.attempt_timeout;
  if (creds) {
    auto refused = co_await upstream::apply_credential(*creds, req, deadline);
    if (refused) {
      bool const keep = client_wants_keep_alive && parser.is_done() && !ctx.sessions->draining();
      error_reply const reply = fail({default_status(refused->type), refused->type, refused->message});
      co_await send_error(client, reply, keep, idle);
      co_return keep;
    }
  }
  // A fresh connection, never a pooled one: this request cannot be sent a second time (its
  // body streams through once, or R-6 forbids a repeat), and a pooled connection can turn
  // out dead only once the request is on it, when the upstream may have processed it.
  std::optional<upstream::connection> up;
  {
    auto c = co_await upstream::open_connection(target.connect_host, target.port, tls, deadline);
    if (!c.conn) {
      bool const keep = client_wants_keep_alive && parser.is_done() && !ctx.sessions->draining();
      error_reply const reply = fail({default_status(c.error), c.error, c.message});
      co_await send_error(client, reply, keep, idle);
      co_return keep;
    }
    up.emplace(std::move(*c.conn));
  }
  beast::flat_buffer ubuf(upstream::response_buffer_limit);
  std::optional<response_parser> rp;
  bhttp::request_serializer<bhttp::buffer_body> sr{req};
  // 1xx go to an HTTP/1.1 client; a 100 only to one that asked and has not had one.
  upstream::interim_route interim{client_version >= 11 ? &client : nullptr, idle, want_continue, false, false};
  bool body_skipped = false;  // the upstream answered before wanting the body

  {
    if (want_continue) {
      up->expires_at(deadline);
      auto [ec, n] = co_await bhttp::async_write_header(*up, sr, use_tuple);
      if (ec) {
        error_reply const reply =
            fail({502, upstream::classify_connect_error(ec), "sending the request failed: " + ec.message()});
        co_await send_error(client, reply, false, idle);
        co_return false;
      }
      // Wait briefly for the upstream's own 100 or early final answer. On TLS a readable
      // socket may carry only a session ticket, and waiting on a TLS read could not be
      // abandoned cleanly, so a TLS upstream is not waited for: the client is told to go on.
      bool upstream_spoke = false;
      if (!up->is_tls()) {
        net::steady_timer timer(co_await net::this_coro::executor);
        timer.expires_at(std::min(clock::now() + expect_wait, deadline));
        auto readable = up->socket().async_wait(tcp::socket::wait_read, use_tuple);
        auto expire = timer.async_wait(use_tuple);
        auto spoke = co_await (std::move(readable) || std::move(expire));
        upstream_spoke = spoke.index() == 0;
      }
      if (upstream_spoke) {
        interim.stop_at_100 = true;
        auto failed = co_await upstream::read_final_head(*up, ubuf, rp, is_head, deadline, interim);
        interim.stop_at_100 = false;
        if (!failed && !interim.client) co_return false;  // the client left before its 100
        if (failed) {
          error_reply const reply = fail(upstream_failure(*failed));
          co_await send_error(client, reply, false, idle);
          co_return false;
        }
        // A 100 read here went to the client already; a final status instead means the
        // upstream refused the body.
        if (interim.sent_100)
          rp.reset();
        else
          body_skipped = rp->get().result_int() >= 200;
      }
      if (!interim.sent_100 && !body_skipped) {
        static constexpr std::string_view continue_line = "HTTP/1.1 100 Continue\r\n\r\n";
        client.expires_after(idle);
        auto [cec, cn] = co_await net::async_write(client, net::buffer(continue_line), use_tuple);
        if (cec) co_return false;
        interim.sent_100 = true;
      }
    }
    if (!body_skipped) {
      auto const upload_start = clock::now();
      auto rr =
          co_await relay_request_body(client, buffer, parser, *up, sr, idle, prefix, pace_of(ctx.cfg(), body_start));
      // The attempt timeout measures the upstream, not how slowly the client uploads.
      deadline += clock::now() - upload_start;
      if (rr.read_error) {
        auto reply = body_read_refusal(rr.read_error, parser);
        if (reply) {
          reply->dependency = std::string(dependency);
          co_await send_error(client, *reply, false, idle);
        }
        co_return false;
      }
      if (rr.write_error) {
        error_reply const reply = fail({502, upstream::classify_connect_error(rr.write_error),
                                        "sending the request body failed: " + rr.write_error.message()});
        co_await send_error(client, reply, false, idle);
        co_return false;
      }
    }
  }

  if (!rp) {
    auto failed = co_await upstream::read_final_head(*up, ubuf, rp, is_head, deadline, interim);
    if (failed) {
      error_reply const reply = fail(upstream_failure(*failed));
      co_await send_error(client, reply, false, idle);
      co_return false;
    }
  }

  auto& res = rp->get();
  attempt_over({res.result_int(), std::nullopt});
  guard.answered(res.result_int());
  bool const upstream_keep_alive = rp->keep_alive();
  bool const client_keep_alive = prepare_client_response(
      res, *rp, is_head, client_version, client_wants_keep_alive && parser.is_done() && !ctx.sessions->draining(), 1);
  bhttp::response_serializer<bhttp::buffer_body> rsr{res};
  auto rr = co_await relay_response_body(*up, ubuf, *rp, client, rsr, idle);
  if (!rr.ok()) {
    if (rr.read_error)
      log_upstream_error(ctx, facts, "upstream_protocol_error", 0, 1,
                         "response body cut short: " + rr.read_error.message());
    co_return false;  // the client saw a partial response: only a close tells it so
  }
  if (upstream_keep_alive && !body_skipped && ubuf.size() == 0) {
    up->expires_never();
    ctx.pool->put(key, std::move(*up));
  }
  co_return client_keep_alive;
}

}  // namespace rebound::http
