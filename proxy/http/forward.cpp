#include "proxy/http/forward.hpp"
#include "proxy/runtime/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"

#include "proxy/http/cancel_at.hpp"
#include "proxy/http/forward_once.hpp"
#include "proxy/http/hand_over.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/runtime/retry_buffer.hpp"
#include "proxy/http/websocket.hpp"
#include "proxy/wire/upgrade.hpp"
#include "proxy/wire/wire_head.hpp"
#include "proxy/plan/upstream_error.hpp"
#include "proxy/plan/request_plan.hpp"
#include "proxy/retry/hedge.hpp"
#include "proxy/http/retry_loop.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <optional>

namespace rebound::http {

net::awaitable<bool> send_error(beast::tcp_stream& client, const error_reply& e, bool keep_alive,
                                std::chrono::milliseconds idle) {
  auto res = make_error_response(e, keep_alive);
  client.expires_after(idle);
  auto [ec, n] = co_await bhttp::async_write(client, res, use_tuple);
  co_return !ec;
}

namespace {

/// Says in the log why a request that R-6 would let retry goes out only once.
void log_sent_once(const runtime::session_context& ctx, const retry::request_facts& facts, const retry::policy& policy,
                   std::string_view reason) {
  if (!facts.may_retry || policy.max_retries == 0) return;
  ctx.log->info("retry_disabled", facts.summary(), {{"reason", reason}});
}

}  // namespace

// Its own coroutine: the serializer and relay state exist only while a response streams,
// not in the frame of every request waiting for a retry.
net::awaitable<bool> relay_final_response(const runtime::session_context& ctx, beast::tcp_stream& client,
                                          upstream::exchange& ex, const final_answer& a) {
  auto const& facts = a.facts;
  unsigned const attempts = a.client.attempts;
  auto const& key = a.key;
  auto const idle = ctx.cfg().limits.idle_timeout;
  auto& rp = *ex.response;
  bool const upstream_keep_alive = rp.keep_alive();
  bool const client_keep_alive = prepare_client_response(rp, a.client);
  // The request's head is no longer needed: no attempt follows a final answer.
  auto& head = ex.head_text;
  head.clear();
  append_head(head, rp);
  relay_pacing const how{idle, ctx.buffers};
  auto rr = co_await relay_response_body({*ex.stream, ex.buffer, rp}, client, head, how);
  if (!rr.ok()) {
    if (rr.read_error)
      plan::log_upstream_error(
          ctx, facts, {"upstream_protocol_error", 0, attempts, "response body cut short: " + rr.read_error.message()});
    co_return false;
  }
  if (upstream_keep_alive && ex.buffer.size() == 0 && !key.empty()) {
    ex.stream->expires_never();
    ctx.pool->put(key, std::move(*ex.stream));
  }
  co_return client_keep_alive;
}

namespace {

/// rebound's answer when the loop left no response, logged.
error_reply failure_reply(const runtime::session_context& ctx, const retry::request_facts& facts,
                          const loop_result& result) {
  auto const& f = *result.failure;
  plan::log_upstream_error(ctx, facts, {to_string(f.type), default_status(f.type), result.attempts, f.message});
  return error_reply{default_status(f.type), f.type,
                     f.message,             std::string(facts.dependency),
                     result.attempts,       default_retry_after_s(f.type),
                     result.gave_up};
}

enum class body_kept { kept, overflow, ended };

/** Reads the body of `r` into `body` to keep it for resends. `ended`: the request is over
    (answered, or the client left); `overflow`: a chunked body outgrew max_retry_body and
    what was read must still go out. Its own coroutine, so that a request without a body
    carries none of its state in its frame. */
net::awaitable<body_kept> keep_request_body(const client_request& r, const retry::request_facts& facts,
                                            std::string& body) {
  auto kept = co_await read_whole_body(r, body, r.route.policy->max_retry_body);
  if (kept.problem) {
    if (kept.problem->status != 0) {
      r.route.guard->answered(kept.problem->status);
      kept.problem->dependency = std::string(facts.dependency);
      co_await send_error(r.client, *kept.problem, false, r.ctx.cfg().limits.idle_timeout);
    }
    co_return body_kept::ended;
  }
  co_return kept.overflow ? body_kept::overflow : body_kept::kept;
}

/// Answers a request the retry loop left without a response; its own coroutine for the same reason.
net::awaitable<bool> answer_failure(const client_request& r, const retry::request_facts& facts,
                                    const loop_result& result, bool keep, bool upgrade) {
  auto& guard = *r.route.guard;
  auto const reply = failure_reply(r.ctx, facts, result);
  guard.answered(reply.status);
  if (upgrade) guard.upgrade_ended(websocket_protocol, "failed", 0, 0);
  co_await send_error(r.client, reply, keep, r.ctx.cfg().limits.idle_timeout);
  co_return keep;
}

/** A request whose body is none or kept in memory: attempts run in the retry loop and
    the last response is streamed to the client. A WebSocket handshake (`upgrade`) is one
    such request up to the upstream's 101, and a tunnel after it. */
net::awaitable<bool> forward_buffered(const client_request& r, runtime::session_guard& session,
                                      const retry::request_facts& facts, bool upgrade) {
  auto const& ctx = r.ctx;
  auto& client = r.client;
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

  std::string body;
  if (!parser.is_done()) {
    auto const kept = co_await keep_request_body(r, facts, body);
    if (kept == body_kept::ended) co_return false;
    if (kept == body_kept::overflow) {
      log_sent_once(ctx, facts, policy, "chunked body larger than max_retry_body: sent once");
      co_return co_await forward_once(r, facts, body);
    }
  }
  prepare_upstream_request(req, parser, target, ctx.instance_token);
  if (upgrade) carry_websocket_upgrade(req.base());
  // A kept chunked body now has a length; upstreams that refuse chunked requests (many
  // older servers answer 411) take it too.
  if (parser.chunked()) req.content_length(body.size());

  auto const key = pool_key(target, route.tls);
  // Hedged requests (retry/hedge.hpp): idempotent methods only, whatever the route says;
  // never a handshake, which two copies would make two connections the upstream keeps open.
  auto const hedge =
      retry::plan_hedge(policy, facts.may_retry && !upgrade && retry::idempotent_method(facts.method),
                        policy.hedge.enabled() && policy.hedge.after_p95 ? guard.observed_p95() : std::nullopt);
  // Copies in flight at once must not write interim (1xx) answers to the client side by
  // side, nor be cancelled halfway through one: a hedged request drops them.
  bool const pass_interim = client_version >= 11 && hedge.max == 0;
  retry::step_context const step{policy, facts, *ctx.log, *ctx.rng, guard, guard, true, ctx.tracer, r.route.slots};
  interim_to_client interim_out{client, idle};
  auto to = destination_of(route, target, key, req);
  to.may_reuse = facts.may_retry;
  to.interim_to = pass_interim ? &interim_out : nullptr;
  to.upgrade = upgrade;
  http1_request const request{*ctx.pool, to, req, body, is_head};
  retry::loop_hooks const hooks{ctx.sessions->draining_flag(), session.drain_slot(), &client.socket()};
  auto result = co_await run_retry_loop(step, request, hooks, &hedge);
  if (result.client_gone) co_return false;

  bool const keep = client_wants_keep_alive && !ctx.sessions->draining();
  if (result.failure) co_return co_await answer_failure(r, facts, result, keep, upgrade);
  auto& ex = *result.response;
  auto const status = ex.response->get().result_int();
  guard.answered(status);
  // A 101 came only because it was asked for and switched to WebSocket (upstream/attempt.hpp).
  if (status == 101) {
    co_await relay_switch(r, ex, facts, result.attempts);
    co_return false;
  }
  if (upgrade) guard.upgrade_ended(websocket_protocol, "declined", 0, 0);
  final_answer const answer{facts, {is_head, client_version, keep, result.attempts, result.gave_up}, key};
  bool const kept = co_await relay_final_response(ctx, client, ex, answer);
  ctx.pool->recycle(std::move(result.response));
  co_return kept;
}

}  // namespace

namespace {

/// How a request is to be forwarded, decided before anything is sent.
struct forward_plan {
  enum class route { refuse, buffered, once } how = route::buffered;
  error_reply refusal;  ///< with route::refuse
  bool keep_after_refusal = false;
  plan::request_plan request;      ///< what every door decides (plan/request_plan.hpp)
  std::string_view sent_once_why;  ///< with route::once
  bool upgrade = false;            ///< a WebSocket handshake (wire/upgrade.hpp)

  void refuse(error_reply e, bool keep_after) {
    how = route::refuse;
    refusal = std::move(e);
    keep_after_refusal = keep_after;
  }
};

/// An upgrade the route lets through is forwarded as one; a malformed handshake, or one the
/// route's `upgrades:` refuses, is answered and nothing reaches the upstream.
std::optional<error_reply> refused_upgrade(const upgrade_ask& ask, const retry::policy& policy,
                                           std::string_view dependency) {
  if (ask.what == upgrade_ask::kind::malformed)
    return error_reply{400, error_type::bad_request, ask.why, std::string(dependency), 0};
  if (!policy.websocket_upgrades)
    return error_reply{403, error_type::upgrade_refused,
                       "this route does not let WebSocket upgrades through (upgrades: [])", std::string(dependency), 0};
  if (retry::hands_over_calls(policy.context))
    return error_reply{403, error_type::upgrade_refused,
                       "this route hands its calls over for later delivery; a WebSocket cannot wait",
                       std::string(dependency), 0};
  return std::nullopt;
}

/** The decisions about a request head: HTTP/1.1's Expect, the one request plan every door
    runs (plan/request_plan.hpp), then what only HTTP/1.1 has: upgrades and whether the body
    is kept for a resend. A plain function, so its temporaries stay off the coroutine frame
    that lives as long as the request (and its backoff waits). */
void plan_request(forward_plan& plan, const client_request& r, const upgrade_ask& ask,
                  std::chrono::steady_clock::time_point now) {
  auto& parser = r.parser;
  auto const& policy = *r.route.policy;
  auto& req = parser.get();
  if (auto unmet = unmet_expectation(req)) return plan.refuse(std::move(*unmet), false);
  bool const keep_after = parser.is_done() && req.keep_alive();
  plan.upgrade = ask.what != upgrade_ask::kind::none;
  auto const method = req.method() != bhttp::verb::unknown ? bhttp::to_string(req.method()) : "extension";
  plan::request_in const in{plan::door::http1, r.route, r.target, req.method(), method, *r.ctx.rng, now};
  if (auto refusal = plan::plan_request(plan.request, plan::fields_view(req.base()), in))
    return plan.refuse(std::move(*refusal), keep_after);
  plan::edits_of(plan.request, policy.idempotency.header,
                 [&req](std::string_view name, std::string_view value) { req.set(name, value); });
  if (plan.upgrade)
    if (auto refusal = refused_upgrade(ask, policy, r.route.name)) return plan.refuse(std::move(*refusal), keep_after);

  // A body can be sent again only if it is kept: one over max_retry_body streams through
  // once. A chunked body is kept while it fits (forward_buffered finds out).
  auto const& facts = plan.request.facts;
  bool const has_body = !parser.is_done();
  auto const cl = parser.content_length();
  // With Expect: 100-continue the head must go upstream before the body is read (RFC 9110
  // 10.1.1), so such a body streams through once too.
  bool const expects_continue = has_body && req.version() >= 11 && req.count(bhttp::field::expect) > 0;
  bool const keepable = !has_body || (!expects_continue && (parser.chunked() || (cl && *cl <= policy.max_retry_body)));
  if (keepable && (facts.may_retry || !has_body)) {
    plan.how = forward_plan::route::buffered;
    return;
  }
  plan.how = forward_plan::route::once;
  plan.sent_once_why = expects_continue ? "Expect: 100-continue: the body streams through once"
                                        : "body larger than max_retry_body: sent once";
}

/** Whether the request is handed over (true), else its plan, made. The upgrade it may ask
    for is read once for both questions; a plain function, so nothing of it joins the
    request's coroutine frame. */
bool handed_over_or_planned(forward_plan& plan, const client_request& r) {
  auto const ask = read_upgrade(r.parser.get().base());
  if (wants_hand_over(r.ctx, r.parser, *r.route.policy, ask.what != upgrade_ask::kind::none)) return true;
  plan_request(plan, r, ask, std::chrono::steady_clock::now());
  return false;
}

/** An open breaker in enforce mode fails the request fast (503 circuit_open) with the time
    until it lets a probe through as Retry-After; nothing reaches the upstream. */
void refuse_if_circuit_open(forward_plan& plan, retry::dependency_guard& guard, const request_parser& parser) {
  if (auto refusal = plan::admit(guard))
    plan.refuse(std::move(*refusal), parser.is_done() && parser.get().keep_alive());
}

}  // namespace

upstream::destination destination_of(const plan::dependency_route& route, const plan::request_target& t,
                                     const std::string& pool_key, const request_message<bhttp::buffer_body>& req) {
  return destination_of(route, t, pool_key, req.find(bhttp::field::authorization) != req.end());
}

net::awaitable<bool> forward(const client_request& r, runtime::session_guard& session) {
  auto const& ctx = r.ctx;
  auto& client = r.client;
  auto& parser = r.parser;
  auto const& route = r.route;
  auto const& policy = *route.policy;
  auto& guard = *route.guard;
  forward_plan plan;
  if (handed_over_or_planned(plan, r)) co_return co_await hand_over(r);
  if (plan.how != forward_plan::route::refuse) refuse_if_circuit_open(plan, guard, parser);
  // A body kept for a replay takes its room from the process's retry buffer first (a chunked
  // one the most it may grow to); with none left it streams through once.
  runtime::retry_buffer::lease kept;
  if (plan.how == forward_plan::route::buffered && !parser.is_done() && ctx.kept_bodies) {
    auto const cl = parser.content_length();
    kept = ctx.kept_bodies->take(cl ? *cl : policy.max_retry_body, ctx.cfg().limits.retry_buffer);
    if (!kept) {
      plan.how = forward_plan::route::once;
      plan.sent_once_why = "the process's retry buffer (limits.retry_buffer) is full: sent once";
      guard.declined("retry_buffer_full");
    }
  }
  switch (plan.how) {
    case forward_plan::route::refuse:
      guard.answered(plan.refusal.status);
      if (plan.upgrade) guard.upgrade_ended(websocket_protocol, "refused", 0, 0);
      co_await send_error(client, plan.refusal, plan.keep_after_refusal, ctx.cfg().limits.idle_timeout);
      co_return plan.keep_after_refusal;
    case forward_plan::route::buffered:
      co_return co_await forward_buffered(r, session, plan.request.facts, plan.upgrade);
    case forward_plan::route::once:
      log_sent_once(ctx, plan.request.facts, policy, plan.sent_once_why);
      break;
  }
  co_return co_await forward_once(r, plan.request.facts, {});
}

}  // namespace rebound::http
