#include "proxy/grpc/call_plan.hpp"

#include "proxy/runtime/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/upstream/credential_source.hpp"
#include "proxy/grpc/status.hpp"
#include "proxy/retry/grpc_timeout.hpp"
#include "proxy/plan/upstream_error.hpp"
#include "proxy/plan/locate.hpp"
#include "proxy/plan/loop_guard.hpp"
#include "proxy/retry/retry_after.hpp"
#include "proxy/retry/layers.hpp"

#include <algorithm>
#include <cctype>

namespace rebound::grpc {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

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

h2::message refuse(retry::error_type t, const std::string& message) {
  return trailers_only(code_for(t), message, to_string(t));
}

void plan_call(call_plan& plan, const runtime::session_context& ctx, h2::fields& head) {
  auto find = [&head](std::string_view name) { return h2::message::find_in(head, name); };
  auto const& cfg = ctx.cfg();
  auto const* method = find(":method");
  auto const* path = find(":path");
  auto const* authority = find(":authority");
  if (!authority) authority = find("host");
  if (!method || !path || !authority || path->empty() || path->front() != '/') {
    plan.refusal = refuse(retry::error_type::bad_request, "a call needs :method, :path and :authority");
    return;
  }
  plan.method = *method;
  plan.path = *path;
  bool passed_here = false;
  for (auto const& f : head)
    passed_here |= f.name == "via" && plan::via_value_names_instance(f.value, ctx.instance_token);
  plan::located where;
  plan::locate(where, {plan.method, plan.path, *authority, 1, 11, passed_here}, plan::listener::proxy, cfg);
  if (where.refusal) {
    plan.refusal = refuse(where.refusal->type, where.refusal->message);
    return;
  }
  plan.target = std::move(where.target);
  plan.route = std::move(where.route);
  plan::attach_runtime(plan.route, ctx, plan.target);
  auto const& policy = *plan.route.policy;

  // The one request plan (plan/request_plan.hpp): correlation, grpc-timeout, the caller's JWT,
  // R-6 (a call is a POST on the wire; it may go again when a key makes it safe to).
  plan::request_in const in{plan::door::grpc, plan.route, plan.target, boost::beast::http::verb::post,
                            plan.method,      *ctx.rng,   clock::now()};
  if (auto refusal = plan::plan_request(plan.request, plan::list_view(head), in)) {
    plan.refusal = refuse(refusal->type, refusal->message);
    return;
  }
  plan.request.facts.path = plan.path;  // a gRPC path is the method's name: no query to hide
  plan::edits_of(plan.request, policy.idempotency.header, [&head](std::string_view name, std::string_view value) {
    set_field(head, lower(name), std::string(value));  // HTTP/2 names are lower-case
  });
  set_field(head, "via", "2 " + plan::via_mark(ctx.instance_token));
}

std::optional<h2::message> refused_before_attempts(call_plan& plan) {
  if (plan.refusal) {
    if (plan.route.guard) plan.route.guard->answered(counted_status(plan.refusal->head, {}));
    return std::move(plan.refusal);
  }
  auto& guard = *plan.route.guard;
  if (auto refusal = plan::admit(guard)) {
    auto answer = trailers_only(code::unavailable, refusal->message, to_string(refusal->type));
    say_what_this_layer_did(answer.head, {}, refusal->type);
    guard.answered(counted_status(answer.head, {}));
    return answer;
  }
  return std::nullopt;
}

upstream::destination destination_of(call_plan& plan, const h2::fields& head) {
  plan.pool_key = plan::pool_key(plan.target, plan.route.tls);
  return plan::destination_of(plan.route, plan.target, plan.pool_key,
                              h2::message::find_in(head, "authorization") != nullptr);
}

h2::message failed_answer(const runtime::session_context& ctx, call_plan& plan, const retry::attempts_result& result) {
  auto const& f = result.failure
                      ? *result.failure
                      : retry::attempt_failure{retry::error_type::deadline_exceeded, "the call was cancelled"};
  plan::log_upstream_error(ctx, plan.request.facts, {to_string(f.type), 200, result.attempts, f.message});
  auto failed = trailers_only(code_for(f.type), f.message, to_string(f.type));
  say_what_this_layer_did(failed.head, result, f.type);
  plan.route.guard->answered(counted_status(failed.head, {}));
  return failed;
}

h2::fields attempt_head(const h2::fields& head, bool tls, clock::time_point deadline, unsigned attempt) {
  h2::fields h = head;
  set_field(h, ":scheme", tls ? "https" : "http");
  if (deadline != clock::time_point::max())
    set_field(
        h, "grpc-timeout",
        retry::format_grpc_timeout(std::chrono::duration_cast<std::chrono::microseconds>(deadline - clock::now())));
  if (attempt > 1) set_field(h, "grpc-previous-rpc-attempts", std::to_string(attempt - 1));
  return h;
}

void summarize(const h2::fields& head, const h2::fields& trailers, retry::attempt_summary& s) {
  using h2::message;
  s.outcome.status = status_number(message::find_in(head, ":status")).value_or(0);
  // Trailers-only: grpc-status is in the head, and there are no trailers.
  auto const& status_block = trailers.empty() ? head : trailers;
  if (auto const* gs = message::find_in(status_block, "grpc-status"))
    s.outcome.grpc_status = status_number(gs).value_or(static_cast<unsigned>(code::unknown));
  if (auto const* pushback = message::find_in(status_block, "grpc-retry-pushback-ms")) s.grpc_pushback = *pushback;
  // Retry-After and one layer retries (issue 22): what a rebound further along said of its
  // own retries, in the trailers (or a trailers-only head), else the head.
  retry::read_answer_head(
      [&](auto&& visit) {
        for (auto const* block : {&status_block, &head})
          for (auto const& f : *block) visit(f.name, f.value);
      },
      s);
}

void keep_pushback_well_formed(h2::fields& fields) {
  auto const negative = [](std::string_view v) {
    return v.size() > 1 && v.front() == '-' &&
           std::all_of(v.begin() + 1, v.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  for (auto& f : fields)
    if (f.name == "grpc-retry-pushback-ms" && !negative(f.value) && !retry::parse_grpc_pushback(f.value))
      f.value = "-1";
}

void say_what_this_layer_did(h2::fields& head, const retry::attempts_result& result,
                             std::optional<retry::error_type> failure) {
  set_field(head, "rebound-attempts", std::to_string(result.attempts));
  if (result.gave_up) set_field(head, "rebound-retried", std::string(retry::retried_exhausted));
  if (failure && retry::answers_overloaded(*failure)) set_field(head, "rebound-overloaded", "1");
}

net::awaitable<boost::system::result<std::shared_ptr<h2::client_connection>, retry::attempt_failure>> connect_attempt(
    h2::client_pool& pool, const upstream::destination& to, h2::fields& head, clock::time_point deadline) {
  if (auto* const auth = to.auth) {
    auto cred = co_await auth->authorization(deadline);
    if (!cred.authorization)
      co_return retry::attempt_failure{retry::error_type::auth_refresh_failed,
                                       "no valid credential for the upstream: " + cred.error};
    set_field(head, "authorization", *cred.authorization);
  }
  co_return co_await pool.get(to, deadline);
}

retry::attempt_failure failure_of(const h2::failure& f) {
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

}  // namespace rebound::grpc
