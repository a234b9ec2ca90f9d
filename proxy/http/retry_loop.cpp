#include "proxy/http/retry_loop.hpp"

#include "proxy/retry/hedge.hpp"
#include "proxy/retry/layers.hpp"
#include "proxy/retry/request_timeout.hpp"

#include <algorithm>
#include <vector>

namespace rebound::http {

using clock = std::chrono::steady_clock;

namespace {

/// An HTTP/1.1 attempt: upstream::run_attempt, keeping the response head it returns.
class http1_attempt final : public retry::attempt_runner {
 public:
  http1_attempt(upstream::pool& pool, upstream::destination to, upstream::outgoing_request out, bool sends_deadline)
      : pool_(pool), to_(to), out_(out), sends_deadline_(sends_deadline) {
    to_.used = &used_;
  }
  http1_attempt(const http1_attempt&) = delete;  // to_.used points into this one
  http1_attempt& operator=(const http1_attempt&) = delete;
  /// A hedged request's copies (run_hedged): each passes over the addresses the others went to.
  void hedged_with(const std::vector<http1_attempt*>& copies) { copies_ = &copies; }

  net::awaitable<retry::attempt_summary> run(clock::time_point deadline) override {
    // What this attempt has left, not what the caller first gave: the time spent on earlier
    // attempts and waits is gone, and past this attempt's own timeout nobody reads the answer.
    if (sends_deadline_)
      out_.req.set(retry::request_timeout_header, retry::format_request_timeout(deadline, clock::now()));
    // A retry, or a hedge, prefers an address not yet tried (previous_hosts): neither by its
    // own earlier attempts nor by the copies of a hedged request that went first.
    upstream::remember_tried(tried_, used_);
    used_ = net::ip::address();
    if (copies_)
      for (auto const* c : *copies_)
        if (c != this) {
          upstream::remember_tried(tried_, c->used_);
          for (auto const& a : c->tried_) upstream::remember_tried(tried_, a);
        }
    if (!tried_.empty()) to_.avoid = &tried_;
    auto attempt = co_await upstream::run_attempt(pool_, to_, out_, deadline);
    retry::attempt_summary s;
    s.address = used_;
    if (!attempt) {
      s.failure = std::move(attempt.error());
      co_return s;
    }
    response = std::move(*attempt);
    auto const& h = response->response->fields();
    s.outcome.status = response->response->get().result_int();
    retry::read_answer_head(
        [&h](auto&& visit) {
          for (auto const& f : h) visit(f.name_string(), f.value());
        },
        s);
    co_return s;
  }
  void drop() override { response.reset(); }
  void trace_as(std::string_view traceparent) override { out_.req.set("traceparent", traceparent); }

  std::unique_ptr<upstream::exchange> response;

 private:
  upstream::pool& pool_;
  upstream::destination to_;
  upstream::outgoing_request out_;
  bool sends_deadline_;
  net::ip::address used_;                 ///< where the last attempt went
  std::vector<net::ip::address> tried_;  ///< where the attempts before it went
  const std::vector<http1_attempt*>* copies_ = nullptr;
};

/// What the loop came to; `answered`: the runner holding the response, if one came back.
loop_result loop_result_from(retry::attempts_result r, http1_attempt* answered) {
  loop_result out;
  if (answered && !r.failure && !r.client_gone) out.response = std::move(answered->response);
  out.attempts = r.attempts;
  out.failure = std::move(r.failure);
  out.client_gone = r.client_gone;
  out.gave_up = r.gave_up;
  return out;
}

/** A hedged request: each copy is an HTTP/1.1 attempt of its own (hedge.hpp). A coroutine
    of its own, so that the copies' state is in no frame of an unhedged request. */
net::awaitable<loop_result> run_hedged(const retry::step_context& ctx, const http1_request& request,
                                       retry::loop_hooks hooks, const retry::hedge_plan& hedge) {
  bool const sends_deadline = ctx.facts.deadline.has_value();
  std::vector<http1_attempt*> copies;  // outlives `attempt`, which owns them
  copies.reserve(retry::hedged_attempt::max_copies);
  auto make = [&request, sends_deadline, &copies] {
    auto a = std::make_unique<http1_attempt>(request.pool, request.to,
                                             upstream::outgoing_request{request.req, request.body, request.is_head},
                                             sends_deadline);
    a->hedged_with(copies);
    copies.push_back(a.get());
    return a;
  };
  retry::hedged_attempt attempt(make, hedge, ctx);
  auto r = co_await retry::run_attempts(ctx, attempt, hooks);
  bool const answered = !r.failure && !r.client_gone;
  co_return loop_result_from(std::move(r), answered ? &static_cast<http1_attempt&>(attempt.answered()) : nullptr);
}

}  // namespace

net::awaitable<loop_result> run_retry_loop(const retry::step_context& ctx, const http1_request& request,
                                           retry::loop_hooks hooks, const retry::hedge_plan* hedge) {
  if (hedge && hedge->max > 0) {
    // Made first, then awaited: GCC 12 destroys a by-value argument inside a co_await twice.
    auto hedged = run_hedged(ctx, request, hooks, *hedge);
    co_return co_await std::move(hedged);
  }
  // The attempt lives in this frame, not on the heap: one allocation fewer per request.
  // On HTTP/1.1 a caller's deadline comes only from X-Request-Timeout: it goes on the same way.
  http1_attempt attempt(request.pool, request.to,
                        upstream::outgoing_request{request.req, request.body, request.is_head},
                        ctx.facts.deadline.has_value());
  auto r = co_await retry::run_attempts(ctx, attempt, hooks);
  co_return loop_result_from(std::move(r), &attempt);
}

}  // namespace rebound::http
