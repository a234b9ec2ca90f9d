#include "proxy/inbound/idempotency_gate.hpp"

#include "proxy/runtime/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/idempotency/key.hpp"

#include "proxy/http/forward.hpp"
#include "proxy/wire/framing.hpp"
#include "proxy/wire/hop_by_hop.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/inbound/fingerprint.hpp"
#include "proxy/plan/request_plan.hpp"
#include "proxy/inbound/gate_step.hpp"
#include "proxy/inbound/gate_trace.hpp"
#include "proxy/store/task_store.hpp"
#include "proxy/upstream/attempt.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace rebound::inbound {
namespace {

namespace bhttp = boost::beast::http;
using wall = store::wall_clock;

/// An answer without a Content-Length is read whole (to pin it) up to this; larger: 502. One
/// whose Content-Length passes inbound.max_body is streamed instead, never held.
constexpr std::size_t max_answer = 64 << 20;

/// One request through the gate: what each of its steps reads.
struct gate_call {
  const http::client_request& request;
  const retry::request_facts& facts;  ///< what logs and traces name it by
  gate_trace& trace;
  const runtime::session_context& ctx;
  store::key_store* keys;  ///< the one role of the store the gate uses; null: there is no store
  beast::tcp_stream& client;
  const plan::dependency_route& route;
  const config::inbound_route& ir;
  http::request_message<bhttp::buffer_body>& req;
  unsigned version;
  bool keep;  ///< the client asked to keep the connection
  bool is_head;
  std::chrono::milliseconds idle;
};

/// seed 004's error codes in SPEC 6's shape.
/// The gate's own refusals, in the shape of every rebound error (http::make_error_response):
/// no attempt went to the app.
bhttp::response<bhttp::string_body> gate_error(const gate_call& c, unsigned status, std::string_view type,
                                               std::string_view message, bool keep_alive) {
  http::error_reply const e{status, {}, std::string(message), c.route.name, 0};
  auto res = http::make_error_response(type, e, keep_alive);
  res.version(c.version);
  res.set(bhttp::field::cache_control, "no-store");
  return res;
}

net::awaitable<bool> send(beast::tcp_stream& client, bhttp::response<bhttp::string_body>& res,
                          std::chrono::milliseconds idle) {
  client.expires_after(idle);
  auto [ec, n] = co_await bhttp::async_write(client, res, use_tuple);
  co_return !ec && res.keep_alive();
}

/// A pinned answer as the client gets it: the app's head and body, marked as `status_word`.
bhttp::response<bhttp::string_body> from_pinned(const store::pinned_response& p, std::string_view status_word,
                                                unsigned version, bool keep_alive, bool is_head) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(p.status), version};
  for (auto const& [name, value] : p.headers) res.insert(name, value);
  res.set("Idempotency-Status", status_word);
  res.keep_alive(keep_alive);
  // 204 and 304 have no body and no Content-Length (RFC 9110 8.6); Beast's prepare_payload
  // would write one (or throw, were a body there).
  bool const bodiless = p.status == 204 || p.status == 304 || p.status < 200;
  if (is_head || bodiless) return res;
  res.body() = p.body;
  res.prepare_payload();
  return res;
}

/// What the app answered, whole, or why there is no answer.
struct app_answer {
  std::optional<store::pinned_response> response;
  http::error_reply failure;
  /// Without a response: whether the app may have seen the request (its key must then stay held).
  bool may_have_reached = true;
  /// An answer whose Content-Length passes inbound.max_body: its head is read, its body is
  /// streamed to the client from the connection, never held; the connection is closed after.
  std::unique_ptr<upstream::exchange> too_large{};
};

app_answer failed(const gate_call& c, http::error_type type, std::string message, bool may_have_reached) {
  return {std::nullopt, {http::default_status(type), type, std::move(message), c.route.name, 1}, may_have_reached};
}

/** The request goes to the app once (one layer retries: the caller's), its answer read whole
    by `deadline`, unless its Content-Length says it is larger than inbound.max_body. */
net::awaitable<app_answer> ask_app(const gate_call& c, const plan::request_target& t, const std::string& body,
                                   std::chrono::steady_clock::time_point deadline) {
  auto const max_body = c.ctx.cfg().inbound.max_body;
  auto& req = c.req;
  auto const key = plan::pool_key(t, c.route.tls);
  bool const is_head = c.is_head;
  // Never on a pooled connection: were it dead, whether the app took the request would be
  // unknown, and the gate exists so that the app sees each request once. So its connection is
  // not pooled after either (nothing would take it: 2,000 keyed requests left 1,041 idle app
  // connections): a pool that keeps nothing closes it. A fresh loopback connection costs
  // ~0.1 ms against the key store's commit.
  upstream::pool no_reuse{0, 0, std::chrono::milliseconds(0)};
  upstream::destination const to{key, t.connect_host, t.port, nullptr, nullptr, false, nullptr, false};
  upstream::outgoing_request const out{req, body, is_head};
  auto attempt = co_await upstream::run_attempt(no_reuse, to, out, deadline);
  if (!attempt) co_return failed(c, attempt.error().type, attempt.error().message, attempt.error().may_have_reached);
  auto& ex = **attempt;
  if (auto const cl = ex.response->content_length(); cl && *cl > max_body) {
    app_answer large;
    large.too_large = std::move(*attempt);
    co_return large;
  }
  store::pinned_response r;
  r.status = ex.response->get().result_int();
  upstream::pool_slot const back{no_reuse, key};
  if (!co_await upstream::read_response_body(back, ex, r.body, max_answer, deadline))
    co_return failed(c, http::error_type::upstream_protocol_error, "the app's answer could not be read whole", true);
  auto& head = ex.response->fields();
  http::strip_hop_by_hop(head);
  http::add_via(head, ex.response->get().version());
  for (auto const& f : head) {
    auto const name = f.name();
    if (name == bhttp::field::content_length || name == bhttp::field::transfer_encoding) continue;
    r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  }
  co_return app_answer{std::move(r), {}};
}

/** The client's 504 once the app has taken longer than attempt_timeout, while the gate goes
    on waiting for the app's answer so as to pin it: a key must not be freed while the app may
    still act on its request (seed 004: "gateway timeout then retry (same key) -> one payout").
    The 504 is written by a coroutine of its own; the session coroutine, busy with the app,
    does not touch the client connection until `settle`. */
class answer_on_timeout {
 public:
  answer_on_timeout(beast::tcp_stream& client, http::error_reply reply, std::chrono::milliseconds idle,
                    std::chrono::steady_clock::time_point due)
      : state_(std::make_shared<state>(client.get_executor())) {
    state_->timer.expires_at(due);
    net::co_spawn(client.get_executor(), wait_then_answer(state_, client, std::move(reply), idle), net::detached);
  }
  answer_on_timeout(const answer_on_timeout&) = delete;
  answer_on_timeout& operator=(const answer_on_timeout&) = delete;
  ~answer_on_timeout() {
    state_->settled = true;
    state_->timer.cancel();
  }

  /// No 504 from now on. True when the client has had it: the connection then closes.
  net::awaitable<bool> settle() {
    state_->settled = true;
    if (!state_->answering) {
      state_->timer.cancel();
      co_return false;
    }
    while (!state_->answered) {  // the write under way ends before anything else uses the client
      state_->done.expires_at(std::chrono::steady_clock::time_point::max());
      co_await state_->done.async_wait(use_tuple);
    }
    co_return true;
  }

 private:
  struct state {
    explicit state(const net::executor& ex) : timer(ex), done(ex) {}
    net::steady_timer timer;
    net::steady_timer done;  ///< a waitable event: cancelled once the 504 is written
    bool settled = false;
    bool answering = false;
    bool answered = false;
  };

  static net::awaitable<void> wait_then_answer(std::shared_ptr<state> st, beast::tcp_stream& client,
                                               http::error_reply reply, std::chrono::milliseconds idle) {
    auto [ec] = co_await st->timer.async_wait(use_tuple);
    if (ec || st->settled) co_return;
    st->answering = true;
    co_await http::send_error(client, reply, false, idle);
    error_code ignored;
    client.socket().shutdown(tcp_socket::shutdown_send, ignored);
    st->answered = true;
    st->done.cancel();
  }

  std::shared_ptr<state> state_;
};

/// relay_final_response's key for a connection it must close, not pool.
const std::string no_pool;

/// Streams an answer too large to keep (ask_app's `too_large`) to the client, as the
/// forwarding path streams any answer.
net::awaitable<bool> relay_unkept(const gate_call& c, app_answer& answer) {
  c.route.guard->answered(answer.too_large->response->get().result_int());
  http::final_answer const last{c.facts, {c.is_head, c.version, c.keep, 1, false}, no_pool};
  co_return co_await http::relay_final_response(c.ctx, c.client, *answer.too_large, last);
}

/// The app's span (gate_trace): its status, the status of an answer too large to keep, or why none came.
void app_call_ended(gate_trace& trace, const app_answer& a) {
  if (a.response)
    trace.app_call_ended(a.response->status, {});
  else if (a.too_large)
    trace.app_call_ended(a.too_large->response->get().result_int(), {});
  else
    trace.app_call_ended(std::nullopt, http::to_string(a.failure.type));
}

/// The status the client got, for the dependency's counts and the span.
void answered(const gate_call& c, unsigned status) {
  c.route.guard->answered(status);
  c.trace.answered(status);
}

/// Sends one of the gate's own answers (gate_step.hpp). Unread body bytes would be taken for
/// the next request: only a whole request keeps the connection.
net::awaitable<bool> refuse(const gate_call& c, const gate_refusal& r) {
  c.route.guard->idempotent(r.outcome);
  answered(c, r.status);
  c.trace.status(r.trace_status);
  auto res = gate_error(c, r.status, r.type, r.message, c.keep && c.request.parser.is_done());
  if (r.retry_after_s) res.set(bhttp::field::retry_after, std::to_string(*r.retry_after_s));
  co_return co_await send(c.client, res, c.idle);
}

void log_move(const gate_call& c, const held_key& k, key_move m) {
  c.ctx.log->info("idempotency", {{"dependency", c.route.name},
                                  {"idempotency_key", k.key},
                                  {"payload_hash", k.hash},
                                  {"from_state", m.from},
                                  {"to_state", m.to}});
}

/** Reads the body whole before anything else (http::take_whole_body): the fingerprint needs
    it, and the app gets it in one piece. nullopt once read; otherwise whether the connection
    stays open, the request answered. */
net::awaitable<std::optional<bool>> take_body(const gate_call& c, std::string& body) {
  auto const got = co_await http::take_whole_body(c.request, body, c.ctx.cfg().inbound.max_body);
  switch (got.how) {
    case http::whole_body::end::read:
      co_return std::nullopt;
    case http::whole_body::end::too_large: {
      auto const too_large = body_too_large();
      co_return co_await refuse(c, too_large);
    }
    case http::whole_body::end::refused:
      co_await http::send_error(c.client, *got.problem, false, c.idle);
      break;
    case http::whole_body::end::client_gone:
      break;
  }
  co_return false;
}

/// The request as the app gets it: rewritten as every proxied request is, its body framed
/// whole, its span started.
void prepare_for_app(const gate_call& c, std::size_t body_size) {
  http::prepare_upstream_request(c.req, c.request.parser, c.request.target, c.ctx.instance_token);
  http::frame_whole_body(c.req, body_size);
  c.trace.app_call_starts(c.req);
}

/// Completes the key with the app's answer, or frees it (gate_step's settle_with and
/// after_settle). Returns the answer's Idempotency-Status.
net::awaitable<std::string_view> settle_key(const gate_call& c, const held_key& k, const store::pinned_response& answer,
                                            bool whole) {
  auto const plan = settle_with(k, c.ir, answer, whole);
  bool completed = false;
  if (plan.pin) {
    auto [ce, done] =
        co_await store::async_complete_key(*c.keys, k.scope, *plan.pin, wall::now() + plan.ttl, use_tuple);
    completed = !ce && done;
  }
  if (!completed) {
    auto [re, released] = co_await store::async_release_key(*c.keys, k.scope, use_tuple);
  }
  auto const end = after_settle(completed, whole);
  log_move(c, k, end.move);
  c.route.guard->idempotent(end.outcome);
  co_return end.word;
}

/// A request that holds no key: the app's answer is relayed as it is, and the caller's retry
/// is the only one.
net::awaitable<bool> answer_unheld(const gate_call& c, const std::string& body,
                                   std::chrono::steady_clock::time_point answer_by) {
  prepare_for_app(c, body.size());
  auto answer = co_await ask_app(c, c.request.target, body, answer_by);
  app_call_ended(c.trace, answer);
  if (answer.too_large) co_return co_await relay_unkept(c, answer);
  if (!answer.response) {
    answered(c, answer.failure.status);
    co_await http::send_error(c.client, answer.failure, c.keep, c.idle);
    co_return c.keep;
  }
  answered(c, answer.response->status);
  auto res = from_pinned(*answer.response, {}, c.version, c.keep, c.is_head);
  res.erase("Idempotency-Status");
  co_return co_await send(c.client, res, c.idle);
}

/** A request that holds its key: it waits for the app's answer as long as the key is held,
    the client getting a 504 at attempt_timeout meanwhile and its retry a 409 until the
    answer is pinned. */
net::awaitable<bool> answer_held(const gate_call& c, const held_key& k, const std::string& body,
                                 std::chrono::steady_clock::time_point started) {
  prepare_for_app(c, body.size());
  answer_on_timeout on_timeout(c.client,
                               http::error_reply{504, http::error_type::attempt_timeout,
                                                 "the app did not answer within attempt_timeout; the key stays held "
                                                 "until it does, and its answer is pinned",
                                                 c.route.name, 1},
                               c.idle, started + c.route.policy->attempt_timeout);
  auto answer = co_await ask_app(c, c.request.target, body, started + c.ctx.cfg().inbound.claim_lease);
  app_call_ended(c.trace, answer);
  bool const client_answered = co_await on_timeout.settle();
  if (client_answered) answered(c, 504);
  if (answer.too_large) {
    // Streamed, never held: what the key keeps is that it completed, and with which status.
    store::pinned_response const status_only{answer.too_large->response->get().result_int(), {}, {}};
    c.trace.status(co_await settle_key(c, k, status_only, false));
    if (client_answered) co_return false;
    co_return co_await relay_unkept(c, answer);
  }
  if (!answer.response) {
    auto const step = after_app_failure(answer.may_have_reached);
    if (step.release) {
      auto [re, released] = co_await store::async_release_key(*c.keys, k.scope, use_tuple);
    }
    log_move(c, k, step.move);
    c.trace.status("not-stored");
    if (client_answered) co_return false;
    answered(c, answer.failure.status);
    co_await http::send_error(c.client, answer.failure, c.keep, c.idle);
    co_return c.keep;
  }
  auto const& r = *answer.response;
  auto const word = co_await settle_key(c, k, r, r.body.size() <= c.ctx.cfg().inbound.max_body);
  c.trace.status(word);
  if (client_answered) co_return false;  // it had its 504; its retry gets what was pinned
  answered(c, r.status);
  auto res = from_pinned(r, word, c.version, c.keep, c.is_head);
  co_return co_await send(c.client, res, c.idle);
}

/// Claims the key and does what the claim found (gate_step's after_claim): refuse, replay
/// what is pinned, or ask the app.
net::awaitable<bool> answer_claimed(const gate_call& c, const held_key& k, const std::string& body,
                                    std::chrono::steady_clock::time_point started) {
  auto const now = wall::now();
  // The key is held while its request may be at the app: a crash mid-request frees it
  // only once the lease has run out.
  auto const lease = now + c.ctx.cfg().inbound.claim_lease;
  auto [e, claim] = co_await store::async_claim_key(*c.keys, k.scope, k.hash, now, lease, use_tuple);
  if (e) {
    if (e->full && e->first) c.ctx.log->warn("store_full", {{"dependency", c.route.name}, {"message", e->message}});
    auto const refusal = claim_failed(*e);
    co_return co_await refuse(c, refusal);
  }
  auto const step = after_claim(k, claim, c.ir.idempotency.mismatch_status);
  log_move(c, k, step.move);
  if (auto const* refusal = std::get_if<gate_refusal>(&step.next)) co_return co_await refuse(c, *refusal);
  if (auto const* pinned = std::get_if<replay>(&step.next)) {
    c.route.guard->idempotent("replayed");
    c.trace.status("replayed");
    answered(c, pinned->answer.status);
    auto res = from_pinned(pinned->answer, "replayed", c.version, c.keep, c.is_head);
    co_return co_await send(c.client, res, c.idle);
  }
  co_return co_await answer_held(c, k, body, started);
}

}  // namespace

net::awaitable<bool> answer_through_gate(const http::client_request& request, const config::inbound_route& ir) {
  auto& req = request.parser.get();
  auto const& route = request.route;
  std::string const method(req.method_string());
  // The one request plan (plan/request_plan.hpp): the facts and the caller's correlation id
  // and traceparent; the key is the gate's own (key_to_hold, below). It refuses nothing here.
  plan::request_plan planned;
  plan::request_in const in{plan::door::inbound,
                            route,
                            request.target,
                            req.method(),
                            method,
                            *request.ctx.rng,
                            std::chrono::steady_clock::now()};
  (void)plan::plan_request(planned, plan::fields_view(req.base()), in);
  auto const& facts = planned.facts;
  gate_trace trace(request.ctx.tracer, *request.ctx.rng, facts.traceparent, facts);
  gate_call const c{request,
                    facts,
                    trace,
                    request.ctx,
                    request.ctx.store,
                    request.client,
                    route,
                    ir,
                    req,
                    req.version(),
                    req.keep_alive(),
                    req.method() == bhttp::verb::head,
                    request.ctx.cfg().limits.idle_timeout};
  if (!c.keys) {
    auto const refusal = no_store();
    co_return co_await refuse(c, refusal);
  }
  auto hold = key_to_hold(req, method, ir, c.ctx.cfg().inbound.principal_header);
  if (auto const* refusal = std::get_if<gate_refusal>(&hold)) co_return co_await refuse(c, *refusal);
  auto& k = std::get<held_key>(hold);
  if (k.holds()) trace.key(k.key);
  std::string body;
  if (auto const answered = co_await take_body(c, body)) co_return *answered;
  auto const started = std::chrono::steady_clock::now();
  if (!k.holds()) {  // a keyed route, a request without a key, none required: forwarded as it is
    route.guard->idempotent("unkeyed");
    co_return co_await answer_unheld(c, body, started + route.policy->attempt_timeout);
  }
  if (!k.event) k.hash = payload_fingerprint(method, req.target(), req[bhttp::field::content_type], body);
  co_return co_await answer_claimed(c, k, body, started);
}

}  // namespace rebound::inbound
