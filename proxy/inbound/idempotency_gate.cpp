#include "proxy/inbound/idempotency_gate.hpp"

#include "proxy/http/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/idempotency/key.hpp"

#include "proxy/http/forward.hpp"
#include "proxy/http/wire/hop_by_hop.hpp"
#include "proxy/http/wire/upgrade.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/inbound/fingerprint.hpp"
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
/// Marks a key whose request completed with an answer too large to keep (inbound.max_body):
/// what is pinned is only its status, and a duplicate is refused rather than run again.
constexpr std::string_view not_kept_field = "Rebound-Answer-Not-Kept";

/// One request through the gate: what each of its steps reads.
struct gate_call {
  const http::session_context& ctx;
  beast::tcp_stream& client;
  const http::dependency_route& route;
  const config::inbound_route& ir;
  http::request_message<bhttp::buffer_body>& req;
  unsigned version;
  bool keep;  ///< the client asked to keep the connection
  bool is_head;
  std::chrono::milliseconds idle;
};

/// What a request holds in the key store: its scope (the store's key), the key or event id
/// the client sent, and the payload's fingerprint (keys only).
struct held_key {
  std::string scope;
  std::string key;
  std::string hash;
  bool event = false;  ///< an event id (dedupe), not an Idempotency-Key
};

/** The key as sent, by R-6's one rule (idempotency/key.hpp): a Structured Field string or a
    bare value, never two fields. Empty when absent; nullopt when malformed. */
std::optional<std::string> key_of(const http::request_message<bhttp::buffer_body>& req) {
  auto const sent = idempotency::sent_key_in(req, idempotency::standard_key_field);
  if (!sent.value) return std::string();
  auto const key = idempotency::key_in_field(*sent.value);
  if (sent.repeated || idempotency::key_problem(key)) return std::nullopt;
  return std::string(key);
}

/** Who is asking: a hash of the field that names the caller (inbound.principal_header,
    Authorization by default), never its value (keys are the caller's own). nullopt when the
    field comes more than once: repeated fields are one list (RFC 9110 5.3), and behind a
    gateway that appends the identity instead of replacing it the first may be the caller's
    forgery. */
std::optional<std::string> principal_of(const http::request_message<bhttp::buffer_body>& req, const std::string& field) {
  if (req.count(field) > 1) return std::nullopt;
  auto const who = req[field];
  return who.empty() ? std::string("anonymous") : sha256_hex(who).substr(0, 32);
}

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
net::awaitable<app_answer> ask_app(const gate_call& c, const http::request_target& t, const std::string& body,
                                   std::chrono::steady_clock::time_point deadline) {
  auto const max_body = c.ctx.cfg().inbound.max_body;
  auto& req = c.req;
  auto const key = http::pool_key(t, c.route.tls);
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
  auto& head = ex.response->get();
  http::strip_hop_by_hop(head.base());
  http::add_via(head.base(), head.version());
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
    explicit state(const net::any_io_executor& ex) : timer(ex), done(ex) {}
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
    client.socket().shutdown(tcp::socket::shutdown_send, ignored);
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
  retry::request_facts facts;
  facts.dependency = c.route.name;
  facts.method = c.req.method_string();
  facts.path = http::loggable_path(c.req.target());
  c.route.guard->answered(answer.too_large->response->get().result_int());
  http::final_answer const last{facts, {c.is_head, c.version, c.keep, 1, false}, no_pool};
  co_return co_await http::relay_final_response(c.ctx, c.client, *answer.too_large, last);
}

void log_move(const gate_call& c, const held_key& k, std::string_view from, std::string_view to) {
  c.ctx.log->info("idempotency", {{"dependency", c.route.name},
                                  {"idempotency_key", k.key},
                                  {"payload_hash", k.hash},
                                  {"from_state", from},
                                  {"to_state", to}});
}

/** What the app's answer does to a held key. 5xx and 429 say "try again": pinning them would
    answer every retry with the failure, so the key is freed; an event is kept only once the
    app took it (2xx). Any other answer completes the key: pinned whole when `whole` (it fits
    inbound.max_body), else only its status under `not_kept_field`, so that a duplicate is
    refused instead of run again. Returns the answer's Idempotency-Status. */
net::awaitable<std::string_view> settle_key(const gate_call& c, const held_key& k, const store::pinned_response& pinned,
                                            bool whole) {
  bool const pin = k.event ? pinned.status / 100 == 2 : pinned.status < 500 && pinned.status != 429;
  bool done = false;
  if (pin) {
    auto const ttl = k.event ? c.ir.dedupe.ttl : c.ir.idempotency.ttl;
    auto [ce, completed] =
        co_await store::async_complete_key(*c.ctx.store, k.scope, pinned, wall::now() + ttl, use_tuple);
    done = !ce && completed;
  }
  if (!done) {
    auto [re, released] = co_await store::async_release_key(*c.ctx.store, k.scope, use_tuple);
    log_move(c, k, "pending", "absent");
    c.route.guard->idempotent("not_stored");
    co_return "not-stored";
  }
  log_move(c, k, "pending", "complete");
  c.route.guard->idempotent(whole ? "stored" : "not_kept");
  co_return whole ? "stored" : "not-stored";
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

}  // namespace

gate_use gate_for(const config::inbound_route& r, const http::request_parser& parser) {
  auto const& req = parser.get();
  // A WebSocket handshake's answer is a 101 and a tunnel: nothing that can be pinned and
  // replayed. It goes to the app as a handshake, unpinned (forward() relays or refuses it).
  if (http::read_upgrade(req).what != http::upgrade_ask::kind::none) return gate_use::none;
  std::string_view const method(req.method_string().data(), req.method_string().size());
  bool const event = !r.dedupe.header.empty() && req.count(r.dedupe.header) > 0;
  if (event) return gate_use::gate;
  if (!r.idempotency.enabled || !r.keeps_keys_for(method)) return gate_use::none;
  // A key that is there (well-formed or not: a malformed one is the gate's 400) or required.
  if (r.idempotency.require || req.count(idempotency::standard_key_field) > 0) return gate_use::gate;
  return gate_use::unkeyed;
}

net::awaitable<bool> answer_through_gate(const http::client_request& request, const config::inbound_route& ir) {
  auto const& ctx = request.ctx;
  auto& client = request.client;
  auto& parser = request.parser;
  auto const& route = request.route;
  auto const& cfg = ctx.cfg();
  auto const idle = cfg.limits.idle_timeout;
  auto& req = parser.get();
  gate_call const c{ctx, client, route, ir, req, req.version(), req.keep_alive(), req.method() == bhttp::verb::head,
                    idle};
  unsigned const version = c.version;
  bool const keep = c.keep;
  bool const is_head = c.is_head;
  std::string const method(req.method_string());
  bool const keyed = ir.idempotency.enabled && ir.keeps_keys_for(method);
  auto& guard = *route.guard;
  retry::request_facts facts;
  facts.dependency = route.name;
  facts.method = method;
  http::describe_target(facts, request.target, false);
  gate_trace trace(ctx.tracer, *ctx.rng, http::traceparent_of(req), facts);
  auto const answered = [&guard, &trace](unsigned status) {
    guard.answered(status);
    trace.answered(status);
  };
  // Messages are literals or named strings, never temporaries built in the co_await
  // expression: GCC 12 destroys those twice.
  auto refuse = [&](unsigned status, std::string_view type, std::string_view outcome,
                    std::string_view message) -> net::awaitable<bool> {
    guard.idempotent(outcome);
    answered(status);
    trace.status(type == "idempotency.in_flight"          ? "in_flight"
                 : type == "idempotency.payload_mismatch" ? "mismatch"
                                                          : "refused");
    // Unread body bytes would be taken for the next request: only a whole request keeps the connection.
    auto res = gate_error(c, status, type, message, keep && parser.is_done());
    if (type == "idempotency.in_flight") res.set(bhttp::field::retry_after, "1");
    if (type == "store_full") res.set(bhttp::field::retry_after, std::to_string(store::full_retry_after_s));
    co_return co_await send(client, res, idle);
  };

  // A reload can add keyed routes to a process that opened no store at start-up: such a
  // route is refused until a restart opens one, never let through unprotected.
  if (!ctx.store)
    co_return co_await refuse(503, "store_unavailable", "missing",
                              "this route keeps idempotency keys or event ids, but rebound started without a store: "
                              "restart it to open one");

  held_key k;
  auto& key = k.key;
  auto& scope = k.scope;
  if (keyed) {
    auto k = key_of(req);
    if (!k)
      co_return co_await refuse(400, "idempotency.key_invalid", "missing",
                                "Idempotency-Key must be one value of 1 to 64 printable characters, no commas");
    if (k->empty() && ir.idempotency.require) {
      std::string const why = "this route requires an Idempotency-Key on " + method + " (R-6)";
      co_return co_await refuse(400, "idempotency.key_missing", "missing", why);
    }
    key = std::move(*k);
    trace.key(key);
    auto const principal =
        ir.idempotency.scope_principal ? principal_of(req, cfg.inbound.principal_header) : std::string("*");
    if (!principal) {
      std::string const why = cfg.inbound.principal_header +
                              " (inbound.principal_header) names the caller and must come once: which one is meant "
                              "is unknown";
      co_return co_await refuse(400, "bad_request", "missing", why);
    }
    if (!key.empty()) scope = "key\n" + *principal + "\n" + ir.match.path_prefix + "\n" + key;
  }
  k.event = scope.empty() && !ir.dedupe.header.empty() && req.count(ir.dedupe.header) > 0;
  bool const event = k.event;
  if (event) {
    key = std::string(req[ir.dedupe.header]);
    if (key.empty() || key.size() > 256) {
      std::string const why = ir.dedupe.header + " must be 1 to 256 characters";
      co_return co_await refuse(400, "idempotency.key_invalid", "missing", why);
    }
    scope = "event\n" + ir.match.path_prefix + "\n" + key;
    trace.key(key);
  }

  // The body is read whole before anything else: the fingerprint needs it, and the app gets
  // it in one piece.
  std::string body;
  // A declared length past max_body is refused before a byte of it is read.
  if (auto const cl = parser.content_length(); cl && *cl > cfg.inbound.max_body)
    co_return co_await refuse(413, "bad_request", "missing", "body larger than inbound.max_body");
  if (!parser.is_done()) {
    if (version >= 11 && req.count(bhttp::field::expect) > 0 && !co_await http::send_continue(client, idle))
      co_return false;
    auto kept = co_await http::read_whole_body(request, body, cfg.inbound.max_body);
    if (kept.problem) {
      if (kept.problem->status == 0) co_return false;
      co_await http::send_error(client, *kept.problem, false, idle);
      co_return false;
    }
    if (kept.overflow || body.size() > cfg.inbound.max_body)
      co_return co_await refuse(413, "bad_request", "missing", "body larger than inbound.max_body");
  }

  if (scope.empty()) {  // a keyed route, a request without a key, none required: forwarded as it is
    guard.idempotent("unkeyed");
  }
  if (!scope.empty() && !event)
    k.hash = payload_fingerprint(method, req.target(), req[bhttp::field::content_type], body);
  auto const started = std::chrono::steady_clock::now();
  if (!scope.empty()) {
    auto const now = wall::now();
    // The key is held while its request may be at the app: a crash mid-request frees it
    // only once the lease has run out.
    auto const lease = now + cfg.inbound.claim_lease;
    auto [e, claim] = co_await store::async_claim_key(*ctx.store, scope, k.hash, now, lease, use_tuple);
    if (e && e->full) {
      // No room to remember the key: the request is not let through unprotected.
      if (e->first) ctx.log->warn("store_full", {{"dependency", route.name}, {"message", e->message}});
      co_return co_await refuse(507, "store_full", "not_stored", e->message);
    }
    if (e) {
      std::string const why = "the key store is unavailable: " + e->message;
      co_return co_await refuse(503, "store_unavailable", "conflict", why);
    }
    switch (claim.state) {
      case store::key_state::claimed:
        log_move(c, k, "absent", "pending");
        break;
      case store::key_state::in_flight:
        log_move(c, k, "pending", "pending");
        co_return co_await refuse(409, "idempotency.in_flight", "conflict",
                                  "a request with this key is still being processed; retry later");
      case store::key_state::mismatch:
        log_move(c, k, "held", "mismatch");
        co_return co_await refuse(ir.idempotency.mismatch_status, "idempotency.payload_mismatch", "mismatch",
                                  "this key was used with another payload; a new request needs a new key");
      case store::key_state::replay: {
        if (!event && std::any_of(claim.response.headers.begin(), claim.response.headers.end(),
                                  [](const auto& f) { return beast::iequals(f.first, not_kept_field); })) {
          // The app ran it; its answer could not be kept. Running it again is what R-6 forbids.
          log_move(c, k, "complete", "mismatch");
          std::string const why = "a request with this key completed with status " +
                                  std::to_string(claim.response.status) +
                                  ", but its answer was larger than inbound.max_body and was not kept; a new request "
                                  "needs a new key";
          co_return co_await refuse(409, "idempotency.answer_not_kept", "conflict", why);
        }
        log_move(c, k, "complete", "replayed");
        guard.idempotent("replayed");
        trace.status("replayed");
        // A repeated event is acknowledged, not answered again: the app already took it.
        auto pinned =
            event ? store::pinned_response{200, {{"Content-Type", "application/json"}}, "{\"duplicate\":true}\n"}
                  : claim.response;
        answered(pinned.status);
        auto res = from_pinned(pinned, "replayed", version, keep, is_head);
        co_return co_await send(client, res, idle);
      }
    }
  }

  http::prepare_upstream_request(req, parser, request.target, ctx.instance_token);
  http::frame_whole_body(req, body.size());
  auto const answer_by = started + route.policy->attempt_timeout;
  trace.app_call_starts(req);
  if (scope.empty()) {  // nothing is held for it: the caller's retry is the only one
    auto answer = co_await ask_app(c, request.target, body, answer_by);
    app_call_ended(trace, answer);
    if (answer.too_large) co_return co_await relay_unkept(c, answer);
    if (!answer.response) {
      answered(answer.failure.status);
      co_await http::send_error(client, answer.failure, keep, idle);
      co_return keep;
    }
    answered(answer.response->status);
    auto res = from_pinned(*answer.response, {}, version, keep, is_head);
    res.erase("Idempotency-Status");
    co_return co_await send(client, res, idle);
  }

  // A held key waits for the app's answer as long as it is held; the client gets a 504 at
  // attempt_timeout meanwhile, and its retry a 409 until the answer is pinned.
  answer_on_timeout on_timeout(client,
                               http::error_reply{504, http::error_type::attempt_timeout,
                                                 "the app did not answer within attempt_timeout; the key stays held "
                                                 "until it does, and its answer is pinned",
                                                 route.name, 1},
                               idle, answer_by);
  auto const held_until = started + cfg.inbound.claim_lease;
  auto answer = co_await ask_app(c, request.target, body, held_until);
  app_call_ended(trace, answer);
  bool const client_answered = co_await on_timeout.settle();
  if (client_answered) answered(504);
  if (answer.too_large) {
    // Streamed, never held: what the key keeps is that it completed, and with which status.
    // Named, not a temporary in the co_await expression: GCC 12 destroys those twice.
    store::pinned_response const status_only{
        answer.too_large->response->get().result_int(), {{std::string(not_kept_field), "1"}}, {}};
    trace.status(co_await settle_key(c, k, status_only, false));
    if (client_answered) co_return false;
    co_return co_await relay_unkept(c, answer);
  }
  if (!answer.response) {
    if (answer.may_have_reached) {
      // The app may have acted on it: a duplicate must not run it again before the lease ends.
      log_move(c, k, "pending", "pending");
    } else {
      auto [re, released] = co_await store::async_release_key(*ctx.store, scope, use_tuple);
      log_move(c, k, "pending", "absent");
    }
    trace.status("not-stored");
    if (client_answered) co_return false;
    answered(answer.failure.status);
    co_await http::send_error(client, answer.failure, keep, idle);
    co_return keep;
  }
  auto& r = *answer.response;
  bool const fits = r.body.size() <= cfg.inbound.max_body;
  store::pinned_response status_only;
  if (!fits) status_only = {r.status, {{std::string(not_kept_field), "1"}}, {}};
  auto const& kept_answer = fits ? r : status_only;
  auto const word = co_await settle_key(c, k, kept_answer, fits);
  trace.status(word);
  if (client_answered) co_return false;  // it had its 504; its retry gets what was pinned
  answered(r.status);
  auto res = from_pinned(r, word, version, keep, is_head);
  co_return co_await send(client, res, idle);
}

}  // namespace rebound::inbound
