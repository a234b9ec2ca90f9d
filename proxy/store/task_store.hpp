#pragma once
/** The durable store behind async delivery (ARCHITECTURE: store/). An interface, so the
    embedded SQLite store and a shared PostgreSQL one plug in under the same scheduler.

    Every call runs on the store's own thread(s), never on an I/O worker: the `submit_*`
    functions queue the work and return at once; the completion is posted back to the
    executor the caller named. `async_*` wrap them as Asio operations (awaitable with
    `use_tuple`). Errors are values: `store_unavailable` when nothing could be made durable. */
#include "proxy/net.hpp"
#include "proxy/store/task.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/post.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rebound::store {

/// What a store call reports besides its value: nothing (ok) or why it failed.
struct store_error {
  std::string message;
};

struct claimed {
  std::vector<retry_task> tasks;
};

class task_store {
 public:
  virtual ~task_store() = default;

  template <class T>
  using callback = std::function<void(std::optional<store_error>, T)>;

  /// Makes `task` durable (committed to disk) before `done` runs without an error.
  virtual void submit_accept(retry_task task, callback<bool> done) = 0;
  /** Claims up to `limit` tasks due at `now` (PENDING, or IN_FLIGHT with a lease that
      expired: an owner that crashed mid-attempt), leased to `owner` until `lease_until`. A
      reclaimed task keeps its attempt count. */
  virtual void submit_claim(std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                            std::size_t limit, callback<std::vector<retry_task>> done) = 0;
  /** Records an attempt of a task `owner` holds and moves it on: back to PENDING at
      `next_attempt_at`, or to a final status. Refused (false) when the lease was lost. */
  virtual void submit_finish_attempt(std::string owner, attempt_log attempt, task_status next,
                                     wall_clock::time_point next_attempt_at, callback<bool> done) = 0;
  /** Gives a task `owner` holds back, due at `until`, with no attempt counted: R-7's budget
      or breaker refused the attempt, which is postponed, never dropped. */
  virtual void submit_postpone(std::string owner, std::string id, wall_clock::time_point until, callback<bool> done) = 0;
  virtual void submit_get(std::string id, callback<std::optional<retry_task>> done) = 0;
  virtual void submit_attempts(std::string id, callback<std::vector<attempt_log>> done) = 0;
  /** Up to `limit` tasks with `status` (of `dependency`, unless empty), ordered by id, after
      the id `after` (the cursor of the page before; empty for the first page). */
  virtual void submit_list(task_status status, std::string dependency, std::string after, std::size_t limit,
                           callback<std::vector<retry_task>> done) = 0;
  /// A dead letter back to PENDING, due at `now`, with a fresh window; false when
  /// there is no dead letter of that id.
  virtual void submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) = 0;
  /// A PENDING task CANCELLED; false when there is none of that id (in flight, ended, unknown).
  virtual void submit_cancel(std::string id, callback<bool> done) = 0;
  /// Tasks by status: what the admin API and the start-up report count.
  virtual void submit_count(task_status s, callback<std::uint64_t> done) = 0;
};

namespace detail {
/// Posts a store completion back onto the caller's executor; the handler is move-only, so
/// it rides in a shared_ptr through the std::function the store takes.
template <class T, class Handler>
auto back_to(Handler handler) {
  auto ex = net::get_associated_executor(handler, net::system_executor());
  auto h = std::make_shared<Handler>(std::move(handler));
  return [ex, h](std::optional<store_error> e, T value) mutable {
    net::post(ex, [h, e = std::move(e), value = std::move(value)]() mutable { (*h)(std::move(e), std::move(value)); });
  };
}
}  // namespace detail

template <class Token>
auto async_accept(task_store& s, retry_task task, Token&& token) {
  return net::async_initiate<Token, void(std::optional<store_error>, bool)>(
      [&s](auto handler, retry_task t) { s.submit_accept(std::move(t), detail::back_to<bool>(std::move(handler))); },
      token, std::move(task));
}

template <class Token>
auto async_finish_attempt(task_store& s, std::string owner, attempt_log attempt, task_status next,
                          wall_clock::time_point next_attempt_at, Token&& token) {
  return net::async_initiate<Token, void(std::optional<store_error>, bool)>(
      [&s](auto handler, std::string o, attempt_log a, task_status n, wall_clock::time_point at) {
        s.submit_finish_attempt(std::move(o), std::move(a), n, at, detail::back_to<bool>(std::move(handler)));
      },
      token, std::move(owner), std::move(attempt), next, next_attempt_at);
}

template <class Token>
auto async_postpone(task_store& s, std::string owner, std::string id, wall_clock::time_point until, Token&& token) {
  return net::async_initiate<Token, void(std::optional<store_error>, bool)>(
      [&s](auto handler, std::string o, std::string i, wall_clock::time_point u) {
        s.submit_postpone(std::move(o), std::move(i), u, detail::back_to<bool>(std::move(handler)));
      },
      token, std::move(owner), std::move(id), until);
}

template <class Token>
auto async_get(task_store& s, std::string id, Token&& token) {
  return net::async_initiate<Token, void(std::optional<store_error>, std::optional<retry_task>)>(
      [&s](auto handler, std::string i) {
        s.submit_get(std::move(i), detail::back_to<std::optional<retry_task>>(std::move(handler)));
      },
      token, std::move(id));
}

template <class Token>
auto async_attempts(task_store& s, std::string id, Token&& token) {
  return net::async_initiate<Token, void(std::optional<store_error>, std::vector<attempt_log>)>(
      [&s](auto handler, std::string i) {
        s.submit_attempts(std::move(i), detail::back_to<std::vector<attempt_log>>(std::move(handler)));
      },
      token, std::move(id));
}

template <class Token>
auto async_list(task_store& s, task_status status, std::string dependency, std::string after, std::size_t limit,
                Token&& token) {
  return net::async_initiate<Token, void(std::optional<store_error>, std::vector<retry_task>)>(
      [&s](auto handler, task_status st, std::string d, std::string a, std::size_t l) {
        s.submit_list(st, std::move(d), std::move(a), l, detail::back_to<std::vector<retry_task>>(std::move(handler)));
      },
      token, status, std::move(dependency), std::move(after), limit);
}

template <class Token>
auto async_replay(task_store& s, std::string id, wall_clock::time_point now, Token&& token) {
  return net::async_initiate<Token, void(std::optional<store_error>, bool)>(
      [&s](auto handler, std::string i, wall_clock::time_point n) {
        s.submit_replay(std::move(i), n, detail::back_to<bool>(std::move(handler)));
      },
      token, std::move(id), now);
}

template <class Token>
auto async_cancel(task_store& s, std::string id, Token&& token) {
  return net::async_initiate<Token, void(std::optional<store_error>, bool)>(
      [&s](auto handler, std::string i) { s.submit_cancel(std::move(i), detail::back_to<bool>(std::move(handler))); },
      token, std::move(id));
}

template <class Token>
auto async_claim(task_store& s, std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                 std::size_t limit, Token&& token) {
  return net::async_initiate<Token, void(std::optional<store_error>, std::vector<retry_task>)>(
      [&s](auto handler, std::string o, wall_clock::time_point n, wall_clock::time_point l, std::size_t lim) {
        s.submit_claim(std::move(o), n, l, lim, detail::back_to<std::vector<retry_task>>(std::move(handler)));
      },
      token, std::move(owner), now, lease_until, limit);
}

}  // namespace rebound::store
