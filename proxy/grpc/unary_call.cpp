#include "proxy/grpc/unary_call.hpp"

#include "proxy/runtime/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/grpc/call_plan.hpp"
#include "proxy/grpc/status.hpp"
#include "proxy/upstream/attempt.hpp"

namespace rebound::grpc {
namespace {

/// gRPC servers allow 4 MiB messages by default; an answer is held whole to read its trailers.
constexpr std::size_t max_response_body = (4u << 20) + 64 * 1024;

/// One attempt of a call over HTTP/2: the upstream's answer, or why there is none.
class h2_attempt final : public retry::attempt_runner {
 public:
  h2_attempt(h2::client_pool& pool, upstream::destination to, const h2::message& request)
      : pool_(pool), to_(to), request_(request) {}

  net::awaitable<retry::attempt_summary> run(clock::time_point deadline) override {
    retry::attempt_summary s;
    ++attempts_;
    h2::message attempt;
    attempt.head = attempt_head(request_.head, to_.tls != nullptr, deadline, attempts_);
    if (!traceparent_.empty()) set_field(attempt.head, "traceparent", traceparent_);
    attempt.body = request_.body;
    attempt.trailers = request_.trailers;
    attempt.budget = request_.budget;
    // A retry prefers an address it has not tried (previous_hosts), on another connection.
    upstream::remember_tried(tried_, used_);
    if (!tried_.empty()) to_.avoid = &tried_;
    auto conn = co_await connect_attempt(pool_, to_, attempt.head, deadline);
    if (!conn) {
      s.failure = std::move(conn.error());
      co_return s;
    }
    used_ = s.address = (*conn)->peer();
    auto const ex = co_await net::this_coro::executor;
    auto answer = co_await (*conn)->exchange(attempt, max_response_body, deadline);
    if (!answer) {
      s.failure = failure_of(answer.error());
      auto const cancelled = (co_await net::this_coro::cancellation_state).cancelled() != net::cancellation_type::none;
      if (!cancelled) upstream::report_address(ex, to_, used_, true);
      co_return s;
    }
    last = std::move(*answer);
    summarize(last->head, last->trailers, s);
    upstream::report_address(ex, to_, used_, retry::fails_address(s.outcome));
    co_return s;
  }
  void drop() override { last.reset(); }
  void trace_as(std::string_view traceparent) override { traceparent_ = traceparent; }

  std::optional<h2::message> last;

 private:
  h2::client_pool& pool_;
  upstream::destination to_;
  const h2::message& request_;
  unsigned attempts_ = 0;
  std::string traceparent_;
  net::ip::address used_;                ///< where the last attempt went
  std::vector<net::ip::address> tried_;  ///< where the attempts before it went
};

}  // namespace

net::awaitable<h2::message> answer_call(runtime::session_context ctx, std::shared_ptr<call_plan> planned,
                                        h2::message request) {
  auto& plan = *planned;
  if (plan.request.facts.may_retry && plan.route.policy && request.body.size() > plan.route.policy->max_retry_body) {
    plan.request.facts.may_retry = false;
    plan.request.facts.why_not = "message larger than max_retry_body: sent once";
  }
  if (auto refusal = refused_before_attempts(plan)) co_return std::move(*refusal);
  auto& guard = *plan.route.guard;
  h2_attempt attempt(*ctx.h2_pool, destination_of(plan, request.head), request);
  retry::step_context const step{*plan.route.policy, plan.request.facts, *ctx.log, *ctx.rng, guard, guard, true,
                                 ctx.tracer,         plan.route.slots};
  retry::loop_hooks const hooks{ctx.sessions->draining_flag(), {}, nullptr};
  auto result = co_await retry::run_attempts(step, attempt, hooks);
  if (result.client_gone) co_return h2::message{};  // the stream is gone: nobody reads an answer
  if (result.failure || !attempt.last) co_return failed_answer(ctx, plan, result);
  auto answer = std::move(*attempt.last);
  say_what_this_layer_did(answer.head, result);
  keep_pushback_well_formed(answer.head);  // a trailers-only answer
  keep_pushback_well_formed(answer.trailers);
  guard.answered(counted_status(answer.head, answer.trailers));
  co_return answer;
}

}  // namespace rebound::grpc
