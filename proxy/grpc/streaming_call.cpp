#include "proxy/grpc/streaming_call.hpp"

#include "proxy/runtime/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/grpc/call_plan.hpp"
#include "proxy/grpc/status.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

namespace rebound::grpc {
namespace {

/// One attempt of a streamed call: a stream opened upstream, up to its answer's head.
class stream_attempt final : public retry::attempt_runner {
 public:
  stream_attempt(h2::client_pool& pool, upstream::destination to, const h2::fields& head,
                 std::shared_ptr<h2::body_pipe> request, clock::time_point call_deadline)
      : pool_(pool), to_(to), head_(head), request_(std::move(request)), call_deadline_(call_deadline) {}

  net::awaitable<retry::attempt_summary> run(clock::time_point deadline) override {
    retry::attempt_summary s;
    ++attempts_;
    if (attempts_ > 1 && !request_->rewind()) {
      // It outgrew what is kept while the retry waited: nothing is sent.
      s.failure = retry::attempt_failure{retry::error_type::upstream_protocol_error,
                                         "the streamed request outgrew max_retry_body before its retry"};
      s.repeatable = false;
      co_return s;
    }
    // The upstream is told the call's own deadline: a stream outlives an attempt's timeout.
    auto head = attempt_head(head_, to_.tls != nullptr, call_deadline_, attempts_);
    if (!traceparent_.empty()) set_field(head, "traceparent", traceparent_);
    auto conn = co_await connect_attempt(pool_, to_, head, deadline);
    s.repeatable = request_->replayable();
    if (!conn) {
      s.failure = std::move(conn.error());
      co_return s;
    }
    response = std::make_shared<h2::body_pipe>();
    // A streaming server may answer only after the client's messages, however long they
    // take: the head is awaited by the caller's deadline, not the attempt's.
    auto answer = co_await (*conn)->open_stream(head, request_, response, call_deadline_);
    s.repeatable = request_->replayable();
    if (!answer) {
      s.failure = failure_of(answer.error());
      response = nullptr;
      co_return s;
    }
    answer_head = std::move(*answer);
    // A trailers-only answer ended with its head; any other head starts the server's stream,
    // which summarizes as its :status (no grpc-status yet): final, never repeated.
    summarize(answer_head, {}, s);
    co_return s;
  }

  void trace_as(std::string_view traceparent) override { traceparent_ = traceparent; }

  void drop() override {
    if (response) response->abandon();  // resets the upstream stream if it is still open
    response = nullptr;
    answer_head.clear();
  }

  /// Whether the last answer was trailers-only (its grpc-status in the head, nothing after).
  bool trailers_only() const { return response && response->ended() && response->total() == 0; }

  std::shared_ptr<h2::body_pipe> response;  ///< the last attempt's answer body, as it arrives
  h2::fields answer_head;

 private:
  h2::client_pool& pool_;
  upstream::destination to_;
  const h2::fields& head_;
  std::shared_ptr<h2::body_pipe> request_;
  clock::time_point call_deadline_;
  unsigned attempts_ = 0;
  std::string traceparent_;
};

/// Waits until the server connection ends the call (its stream closed: the handler is
/// cancelled) or `deadline` passes; true when the deadline did.
net::awaitable<bool> wait_for_end(clock::time_point deadline) {
  auto cs = co_await net::this_coro::cancellation_state;
  if (cs.cancelled() != net::cancellation_type::none) co_return false;
  net::steady_timer timer(co_await net::this_coro::executor, deadline);
  auto [ec] = co_await timer.async_wait(use_tuple);
  co_return !ec;
}

}  // namespace

net::awaitable<void> relay_call(runtime::session_context ctx, std::shared_ptr<call_plan> planned,
                                h2::streamed_request call) {
  auto& responder = *call.responder;
  auto& plan = *planned;
  if (auto refusal = refused_before_attempts(plan)) {
    call.body->abandon();
    responder.respond(std::move(*refusal));
    co_return;
  }
  auto const& policy = *plan.route.policy;
  auto& guard = *plan.route.guard;
  // R-6 and the request body kept for a replay decide whether a retry can go.
  call.body->keep_up_to(plan.request.facts.may_retry ? policy.max_retry_body : 0);
  auto const deadline = plan.request.facts.deadline.value_or(clock::time_point::max());
  stream_attempt attempt(*ctx.h2_pool, destination_of(plan, call.head), call.head, call.body, deadline);
  retry::step_context const step{policy, plan.request.facts, *ctx.log,        *ctx.rng, guard, guard,
                                 true,   ctx.tracer,         plan.route.slots};
  retry::loop_hooks const hooks{ctx.sessions->draining_flag(), {}, nullptr};
  auto result = co_await retry::run_attempts(step, attempt, hooks);
  call.body->stop_keeping();
  if (result.client_gone) {  // the stream is gone: nobody reads an answer
    call.body->abandon();
    attempt.drop();
    co_return;
  }
  if (result.failure || !attempt.response) {
    call.body->abandon();
    responder.respond(failed_answer(ctx, plan, result));
    co_return;
  }
  auto head = std::move(attempt.answer_head);
  say_what_this_layer_did(head, result);
  keep_pushback_well_formed(head);  // a trailers-only answer; a stream's own trailers go on as sent
  if (attempt.trailers_only()) {
    guard.answered(counted_status(head, {}));
    call.body->abandon();
    h2::message whole;
    whole.head = std::move(head);
    responder.respond(std::move(whole));
    co_return;
  }
  // The upstream lost mid-answer: the client gets a status, not a bare stream reset.
  attempt.response->trailers_on_failure =
      status_fields(code::unavailable, "the upstream's stream failed after its answer began", "connect_reset");
  auto const* status = h2::message::find_in(head, ":status");
  h2::fields const head_status{{":status", status ? *status : std::string("502")}};
  responder.respond(std::move(head), attempt.response);
  // The call now runs between the two connections; it may last as long as the caller's
  // deadline allows (total_timeout bounds the retrying, not a stream's life).
  bool const cut_at_deadline = co_await wait_for_end(deadline);
  if (cut_at_deadline) {
    // Ended with DEADLINE_EXCEEDED in trailers, after what already arrived: the client learns
    // why whether or not its own timer has fired yet (a bare RST_STREAM reads as CANCELLED).
    // A client that takes nothing more is reset by the connection's stall check (h2 server).
    attempt.response->trailers_on_failure =
        status_fields(code::deadline_exceeded, "the caller's deadline passed", "deadline_exceeded");
    attempt.response->fail();
  }
  // Counted once the call is over: its grpc-status comes in the trailers, at the end. One
  // the upstream lost mid-answer ends UNAVAILABLE; one the deadline cut, DEADLINE_EXCEEDED;
  // one its client reset before the end, CANCELLED.
  auto const& response = *attempt.response;
  static const h2::fields cancelled{{"grpc-status", "1"}};
  auto const& ended_with = response.failed()  ? response.trailers_on_failure
                           : response.ended() ? response.trailers()
                                              : cancelled;
  guard.answered(cut_at_deadline ? 504u : counted_status(head_status, ended_with));
  call.body->abandon();
  attempt.response->abandon();
}

}  // namespace rebound::grpc
