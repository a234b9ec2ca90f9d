#pragma once
/** Hedged requests (issue 22 part 3; seed 002: "send second copy after p95; cancel slower").

    An idempotent request on a route with `hedge: {after, max}` starts as usual; when its
    first copy has no response head after `after`, a hedge (a second copy, on another
    connection) starts beside it, and so on up to `max`, `after` apart. The first copy to
    bring back an answer R-4 does not call a retryable failure wins; the others are
    cancelled and their connections closed. A copy that fails retryably while another is in
    flight is counted and the others are waited for; when none is left, the run's answer is
    that failure and the retry loop (R-1..R-5) goes on around it as after any attempt.

    Each hedge is an attempt: it counts in Rebound-Attempts and against max_retries, is
    permitted by the dependency's R-7 budget like a retry (a refused hedge is not sent), and
    is never sent while the breaker is not closed. All copies of a run share the first
    copy's attempt timeout.

    The time-dependent rules (the delay, when the next hedge is due, what a finished copy
    means) are pure functions below; `hedged_attempt` does the I/O. */
#include "proxy/retry/policy.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/retry/concurrency_lane.hpp"
#include "proxy/retry/loop.hpp"

#include <boost/asio/steady_timer.hpp>

#include <array>
#include <functional>
#include <memory>
#include <optional>

namespace rebound::retry {

/// Where a hedge's delay came from.
enum class hedge_delay_source { fixed, p95, fallback };
std::string_view to_string(hedge_delay_source s);

/// How one request is hedged, decided before its first attempt.
struct hedge_plan {
  unsigned max = 0;  ///< hedges per run of the retry loop; 0: not hedged
  duration delay{0};
  hedge_delay_source source = hedge_delay_source::fixed;
};

/** `after: p95` before the dependency has latency_tracker::min_samples attempts in its
    window: half the attempt timeout, so only requests that are truly stuck are copied until
    rebound knows what slow means for this dependency. */
duration p95_fallback(duration attempt_timeout);

/** Whether and how a request is hedged. `hedgeable`: its method is idempotent by itself
    (retry::idempotent_method, R-6), it may be sent again, and its body is at hand.
    `observed_p95`: the dependency's, when enough samples exist. The p95 is used as it is,
    at least 1 ms. */
hedge_plan plan_hedge(const retry::policy& p, bool hedgeable, std::optional<duration> observed_p95);

/// How many hedges a run may send: the plan's max, within what max_retries leaves after
/// `attempts_so_far` (this run's first copy included).
unsigned hedges_allowed(const hedge_plan& plan, unsigned max_retries, unsigned attempts_so_far);

/** When the next hedge of a run is due: hedge n (1-based) goes n * `delay` after the run's
    first copy started. None once `allowed` are sent, or when it would start with less than
    min_attempt_time before the run's `deadline` (it could not finish). */
std::optional<std::chrono::steady_clock::time_point> next_hedge_at(std::chrono::steady_clock::time_point run_start,
                                                                   duration delay, unsigned sent, unsigned allowed,
                                                                   std::chrono::steady_clock::time_point deadline);

/// What a finished copy means for its run.
enum class race_move {
  win,              ///< its answer goes to the client; the others are cancelled
  wait_for_others,  ///< a retryable failure, with copies still in flight: counted and dropped
  last_failure,     ///< a retryable failure and nothing else in flight: the run's answer
};
/** A copy whose outcome the route's retry_on does not call retryable wins, a final
    error included (a TLS certificate error surfaces at once, R-9). */
race_move after_copy(const attempt_outcome& outcome, const retry_on& retryable, unsigned still_in_flight);

/** An attempt_runner that runs a hedged request's copies, each on a runner of its own made
    by `make` (the HTTP/1.1 attempt, loop.cpp). Copies run as coroutines spawned on the
    request's executor, each with a cancellation slot; `run` returns only when every copy
    it started has finished or answered its cancellation, so none outlives the request. */
class hedged_attempt final : public attempt_runner {
 public:
  using factory = std::function<std::unique_ptr<attempt_runner>()>;
  static constexpr std::size_t max_copies = 4;  ///< the first and up to three hedges

  hedged_attempt(factory make, const hedge_plan& plan, step_context ctx);
  ~hedged_attempt() override;

  net::awaitable<attempt_summary> run(std::chrono::steady_clock::time_point deadline) override;
  void drop() override;
  /// Every copy of the run sends it (they share the attempt's span).
  void trace_as(std::string_view traceparent) override { traceparent_ = traceparent; }
  /// The runner of the copy whose summary the last run returned (holds its response).
  attempt_runner& answered() { return *copies_[answered_].runner; }

 private:
  struct copy {
    std::unique_ptr<attempt_runner> runner;
    net::cancellation_signal cancel;
    bool running = false;
    bool settled = false;  ///< its result has been looked at
    attempt_summary summary;
    std::chrono::steady_clock::time_point started;
    unsigned number = 0;          ///< its attempt number in the request
    concurrency_lane::slot slot;  ///< a hedge's room in the concurrency limit (the first copy's is the loop's)
  };
  void launch(std::size_t i, std::chrono::steady_clock::time_point deadline, unsigned number,
              concurrency_lane::slot slot = {});
  void finished(std::size_t i, std::exception_ptr e, attempt_summary s);
  /// Records a copy that lost or failed while others ran (metrics, breaker, log).
  void account_dropped(copy& c, std::size_t i, bool cancelled);
  /// Looks at the copies that finished since last time: the one whose answer ends the race, if any.
  std::optional<std::size_t> settle_finished(std::size_t launched);
  /// Sends the next hedge if R-7 and the concurrency limit permit it; else logs why not and
  /// returns false (no further hedge this run).
  bool send_hedge(std::size_t& launched, std::chrono::steady_clock::time_point deadline);
  /// The race is over: the other copies are cancelled and waited for. Returns how many were cut.
  net::awaitable<unsigned> end_race(std::size_t answer, std::size_t launched, net::steady_timer& wake);

  factory make_;
  std::string traceparent_;
  hedge_plan plan_;
  step_context ctx_;
  std::array<copy, max_copies> copies_;
  std::size_t answered_ = 0;
  unsigned sent_ = 0;                  ///< attempts sent by every run so far, hedges included
  unsigned in_flight_ = 0;             ///< copies of the current run not finished yet
  bool fresh_ = false;                 ///< a copy finished since the run last looked
  net::steady_timer* wake_ = nullptr;  ///< the run's wait, cut short when a copy finishes
};

}  // namespace rebound::retry
