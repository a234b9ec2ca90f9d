#include "proxy/grpc/unary_call.hpp"

#include "proxy/auth/credential_source.hpp"
#include "proxy/auth/jwt.hpp"
#include "proxy/grpc/status.hpp"
#include "proxy/grpc/timeout.hpp"
#include "proxy/h2/client_connection.hpp"
#include "proxy/http/dependency_route.hpp"
#include "proxy/http/forward.hpp"
#include "proxy/http/loop_guard.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/idempotency/key.hpp"
#include "proxy/observe/correlation.hpp"
#include "proxy/retry/loop.hpp"

#include <algorithm>
#include <cctype>

namespace rebound::grpc {
namespace {

using clock = std::chrono::steady_clock;

/// gRPC servers allow 4 MiB messages by default; an answer is held whole to read its trailers.
constexpr std::size_t max_response_body = (4u << 20) + 64 * 1024;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

void set_field(h2::fields& fs, std::string_view name, std::string value) {
  for (auto& f : fs)
    if (f.name == name) {
      f.value = std::move(value);
      return;
    }
  fs.push_back({std::string(name), std::move(value)});
}

std::optional<unsigned> status_number(const std::string* v) {
  if (!v || v->empty() || v->size() > 3) return std::nullopt;
  unsigned n = 0;
  for (char c : *v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<unsigned>(c - '0');
  }
  return n;
}

/// What a call's head says, checked once before its first attempt.
struct call_plan {
  std::optional<h2::message> refusal;  ///< set: answer this, nothing is sent
  http::request_target target;
  http::dependency_route route;
  retry::request_facts facts;
  std::string method, path;
  std::string correlation_id;
  std::string key_header;  ///< the idempotency header's name, lower-cased (HTTP/2)
  std::string key;
};

h2::message refuse(retry::error_type t, const std::string& message) {
  return trailers_only(code_for(t), message, to_string(t));
}

/** The decisions about a call's head, in a plain function so their temporaries stay off the
    coroutine frame that lives through the call's backoff waits. */
void plan_call(call_plan& plan, const http::session_context& ctx, h2::message& req) {
  auto const& cfg = ctx.cfg();
  auto const* method = req.find(":method");
  auto const* path = req.find(":path");
  auto const* authority = req.find(":authority");
  if (!authority) authority = req.find("host");
  if (!method || !path || !authority || path->empty() || path->front() != '/') {
    plan.refusal = refuse(retry::error_type::bad_request, "a call needs :method, :path and :authority");
    return;
  }
  plan.method = *method;
  plan.path = *path;
  auto target = http::parse_request_target(plan.method, plan.path, *authority, 1, 11);
  if (!target.value) {
    plan.refusal = refuse(retry::error_type::bad_request, target.error);
    return;
  }
  plan.target = std::move(*target.value);
  auto const token = "rebound (" + std::string(ctx.instance_token) + ")";
  bool passed_here = false;
  for (auto const& f : req.head)
    if (f.name == "via" && f.value.find(token) != std::string::npos) passed_here = true;
  if (passed_here || http::targets_listener(plan.target.connect_host, plan.target.port, cfg.listen)) {
    plan.refusal = refuse(retry::error_type::loop_detected,
                          "forwarding loop: the call targets this rebound (" + plan.target.authority +
                              ") or already passed through it");
    return;
  }
  plan.route = http::route_request(cfg, plan.target, plan.method, false);
  if (!plan.route.dependency && cfg.unknown_hosts == config::unknown_hosts_policy::deny) {
    plan.refusal = refuse(retry::error_type::unknown_host,
                          "host " + plan.target.authority + " is not a configured dependency");
    return;
  }
  http::attach_runtime(plan.route, ctx, plan.target);
  auto const& policy = *plan.route.policy;

  auto& facts = plan.facts;
  facts.dependency = plan.route.name;
  facts.method = plan.method;
  facts.path = plan.path;  // a gRPC path is the method's name: no query to hide
  facts.grpc = true;
  // the client's id, else one rebound makes and sends on.
  if (auto const* id = req.find("x-request-id"); id && observe::usable_correlation_id(*id))
    plan.correlation_id = *id;
  else
    set_field(req.head, "x-request-id", plan.correlation_id = observe::new_correlation_id(*ctx.rng));
  facts.correlation_id = plan.correlation_id;
  if (auto const* a = req.find("authorization")) facts.credential_expires = auth::jwt_expiry(auth::bearer_token(*a));

  // a call is a POST on the wire; it may go again when a key makes it safe to.
  plan.key_header = lower(policy.idempotency.header);
  if (auto const* k = req.find(plan.key_header)) {
    if (auto problem = idempotency::key_problem(*k)) {
      plan.refusal = refuse(retry::error_type::bad_request, *problem);
      return;
    }
    plan.key = *k;
  } else if (policy.idempotency.inject) {
    if (auto k = idempotency::new_key()) {
      plan.key = std::move(*k);
      set_field(req.head, plan.key_header, plan.key);
    }
  }
  facts.idempotency_key = plan.key;
  if (plan.key.empty())
    facts.why_not = "a call without an idempotency key, and idempotency.inject is false (R-6)";
  else if (req.body.size() > policy.max_retry_body)
    facts.why_not = "message larger than max_retry_body: sent once";
  else
    facts.may_retry = true;

  // the caller's own deadline, when it is the nearer one.
  if (auto const* t = req.find("grpc-timeout"))
    if (auto left = parse_timeout(*t)) {
      if (left->count() == 0) {
        plan.refusal = refuse(retry::error_type::deadline_exceeded, "grpc-timeout had run out on arrival");
        return;
      }
      facts.deadline = clock::now() + *left;
    }
  set_field(req.head, "via", "2 " + token);
}

/// One attempt of a call over HTTP/2: the upstream's answer, or why there is none.
class h2_attempt final : public retry::attempt_runner {
 public:
  h2_attempt(h2::client_pool& pool, upstream::destination to, const h2::message& request, auth::credential_source* auth)
      : pool_(pool), to_(to), request_(request), auth_(auth) {}

  net::awaitable<retry::attempt_summary> run(clock::time_point deadline) override {
    retry::attempt_summary s;
    ++attempts_;
    auto attempt = prepare(deadline);
    if (auth_) {
      auto cred = co_await auth_->authorization(deadline);
      if (!cred.authorization) {
        s.failure = upstream::attempt_failure{retry::error_type::auth_refresh_failed,
                                              "no valid credential for the upstream: " + cred.error};
        co_return s;
      }
      set_field(attempt.head, "authorization", *cred.authorization);
    }
    auto conn = co_await pool_.get(to_, deadline);
    if (!conn) {
      s.failure = std::move(conn.error());
      co_return s;
    }
    auto answer = co_await (*conn)->exchange(attempt, max_response_body, deadline);
    if (!answer) {
      s.failure = failure_of(answer.error());
      co_return s;
    }
    last = std::move(*answer);
    summarize(s);
    co_return s;
  }
  void drop() override { last.reset(); }

  std::optional<h2::message> last;

 private:
  /// The request as this attempt sends it: the time left as its grpc-timeout, and the
  /// attempts before it, as gRPC's own retries say (gRPC A6).
  h2::message prepare(clock::time_point deadline) const {
    h2::message m = request_;
    set_field(m.head, ":scheme", to_.tls ? "https" : "http");
    set_field(m.head, "grpc-timeout",
              format_timeout(std::chrono::duration_cast<std::chrono::microseconds>(deadline - clock::now())));
    if (attempts_ > 1) set_field(m.head, "grpc-previous-rpc-attempts", std::to_string(attempts_ - 1));
    return m;
  }

  void summarize(retry::attempt_summary& s) const {
    auto const& m = *last;
    s.outcome.status = status_number(m.find(":status")).value_or(0);
    // Trailers-only: grpc-status is in the head, and there are no trailers.
    auto const* gs = m.trailers.empty() ? m.find("grpc-status") : m.find_trailer("grpc-status");
    if (gs) s.outcome.grpc_status = status_number(gs).value_or(static_cast<unsigned>(code::unknown));
    auto const* pushback = m.trailers.empty() ? m.find("grpc-retry-pushback-ms") : m.find_trailer("grpc-retry-pushback-ms");
    if (pushback) s.grpc_pushback = *pushback;
    if (auto const* ra = m.find("retry-after")) s.retry_after = *ra;
  }

  static upstream::attempt_failure failure_of(const h2::failure& f) {
    using k = h2::failure_kind;
    switch (f.kind) {
      case k::refused:
        // Never processed (RFC 9113 8.7): as safe to send again as a refused connect.
        return {retry::error_type::connect_refused, f.message};
      case k::reset:
      case k::connection_lost:
        return {retry::error_type::connect_reset, f.message};
      case k::timeout:
        return {retry::error_type::attempt_timeout, f.message};
      default:
        return {retry::error_type::upstream_protocol_error, f.message};
    }
  }

  h2::client_pool& pool_;
  upstream::destination to_;
  const h2::message& request_;
  auth::credential_source* auth_;
  unsigned attempts_ = 0;
};

}  // namespace

net::awaitable<h2::message> answer_call(http::session_context ctx, h2::message request) {
  if (ctx.latest) ctx.running = *ctx.latest;
  call_plan plan;
  plan_call(plan, ctx, request);
  if (plan.refusal) {
    if (plan.route.guard) plan.route.guard->answered(200);
    co_return std::move(*plan.refusal);
  }
  auto& guard = *plan.route.guard;
  if (auto refusal = http::refused_by_breaker(guard)) {
    guard.answered(200);
    co_return trailers_only(code::unavailable, refusal->message, to_string(refusal->type));
  }
  auto const key = http::pool_key(plan.target, plan.route.tls);
  // rebound's credential, unless the call carries its own (SPEC 5).
  auto* source = request.find("authorization") ? nullptr : plan.route.auth;
  h2_attempt attempt(*ctx.h2_pool, upstream::destination{key, plan.target.connect_host, plan.target.port, plan.route.tls},
                     request, source);
  auto result = co_await retry::run_attempts(*plan.route.policy, plan.facts, attempt, *ctx.rng, *ctx.log,
                                             retry::loop_hooks{ctx.sessions->draining_flag(), {}, nullptr, &guard, &guard});
  if (result.failure || !attempt.last) {
    auto const& f = result.failure ? *result.failure
                                   : upstream::attempt_failure{retry::error_type::deadline_exceeded, "the call was cancelled"};
    http::log_upstream_error(ctx, plan.facts, to_string(f.type), 200, result.attempts, f.message);
    guard.answered(200);
    auto failed = trailers_only(code_for(f.type), f.message, to_string(f.type));
    failed.head.push_back({"rebound-attempts", std::to_string(result.attempts)});
    co_return failed;
  }
  auto answer = std::move(*attempt.last);
  // SPEC 4: the answer says how many attempts it took, as an HTTP/1.1 one does.
  answer.head.push_back({"rebound-attempts", std::to_string(result.attempts)});
  guard.answered(status_number(answer.find(":status")).value_or(502));
  co_return answer;
}

}  // namespace rebound::grpc
