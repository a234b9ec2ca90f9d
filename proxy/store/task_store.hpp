#pragma once
/** The durable store behind async delivery (ARCHITECTURE: store/). An interface, so the
    embedded SQLite store and a shared PostgreSQL one plug in under the same scheduler.

    Every call runs on the store's own thread(s), never on an I/O worker: the `submit_*`
    functions queue the work and return at once; the completion is posted back to the
    executor the caller named. `async_*` wrap them as Asio operations (awaitable with
    `use_tuple`). Errors are values: `store_unavailable` when nothing could be made durable. */
#include "proxy/net.hpp"
#include "proxy/store/task.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/post.hpp>

#include <array>
#include <functional>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rebound::store {

/// What a store call reports besides its value: nothing (ok) or why it failed.
struct store_error {
  std::string message;
  /// The store refused a new task or key for want of room (store.max_size, or a full disk),
  /// not for want of a database: 507 with Retry-After rather than 503.
  bool full = false;
  /// The first such refusal since the store last had room: what is logged, so a full store
  /// is one warning, not one per call (each refused call is still answered and counted).
  bool first = false;
};

/// The Retry-After of a call refused because the store is full: deliveries and retention
/// make room over minutes, not milliseconds.
inline constexpr unsigned full_retry_after_s = 30;

/** Which tasks a listing or a bulk replay takes: one status, optionally one dependency and a
    span of when they last moved (for a dead letter: when it was dead-lettered), ordered by
    id after the cursor `after` (empty for the first page). */
struct task_filter {
  task_status status = task_status::dead_lettered;
  std::string dependency;  ///< empty: every dependency
  std::optional<wall_clock::time_point> since, until;
  std::string after;
  std::size_t limit = 100;
};

/// A policy registered through the admin API: its id and the text it was registered with,
/// which the loader reads with the same rules as a policy in the YAML file.
struct stored_policy {
  std::string id;
  std::string spec;
  wall_clock::time_point created_at{};
};

/// What registering a policy did: it is idempotent by id, so the same text again is no change.
enum class policy_put { created, unchanged, conflict };

/// An answer kept for an idempotency key (R-6, the inbound side): what a duplicate gets back.
struct pinned_response {
  unsigned status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

/** What claiming a key found: it was free (the caller now holds it), another request with it
    is still under way, its answer is kept, or it was used with another payload. */
enum class key_state { claimed, in_flight, replay, mismatch };
struct key_claim {
  key_state state = key_state::claimed;
  pinned_response response;  ///< for replay
};

/// Tasks by status, indexed by task_status.
using status_counts = std::array<std::uint64_t, 6>;

/// The tasks not yet ended (PENDING or IN_FLIGHT), by when their window started (the accept,
/// or the replay that gave them a fresh one).
struct backlog {
  std::uint64_t started_before = 0;  ///< how many started before the time asked about
  std::optional<wall_clock::time_point> oldest;
};

/// How every store call answers: with an error, or with what it found.
template <class T>
using store_callback = std::function<void(std::optional<store_error>, T)>;

/// Who made tasks due: this process (an accept or replay it committed) or another instance.
enum class due_from { local, fleet };

/** The durable queue of async delivery: tasks, their leases, attempts and dead letters.
    The store contract is split by role, so a part that needs one names only it; both stores
    are all three (task_store). */
class task_queue {
 public:
  template <class T>
  using callback = store_callback<T>;

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
  virtual void submit_postpone(std::string owner, std::string id, wall_clock::time_point until,
                               callback<bool> done) = 0;
  /** Moves the lease of a task `owner` holds on to `lease_until` while its delivery runs, so
      a slow attempt does not lose the task to another instance; false when it was lost. */
  virtual void submit_renew_lease(std::string owner, std::string id, wall_clock::time_point lease_until,
                                  callback<bool> done) = 0;
  virtual void submit_get(std::string id, callback<std::optional<retry_task>> done) = 0;
  /// Up to `limit` attempts of a task after attempt number `after` (0 for the first page).
  virtual void submit_attempts(std::string id, unsigned after, std::size_t limit,
                               callback<std::vector<attempt_log>> done) = 0;
  virtual void submit_list(task_filter filter, callback<std::vector<retry_task>> done) = 0;
  /// A dead letter back to PENDING, due at `now`, with a fresh window; false when
  /// there is no dead letter of that id.
  virtual void submit_replay(std::string id, wall_clock::time_point now, callback<bool> done) = 0;
  /** Replays the dead letters `filter` takes (its status is ignored), up to its limit, in one
      transaction; the ids replayed, so a caller pages on with the last as `after`. */
  virtual void submit_replay_matching(task_filter filter, wall_clock::time_point now,
                                      callback<std::vector<std::string>> done) = 0;
  /// A PENDING task CANCELLED; false when there is none of that id (in flight, ended, unknown).
  /// `now` is when it ended: retention counts from it, not from a retry it had pending.
  virtual void submit_cancel(std::string id, wall_clock::time_point now, callback<bool> done) = 0;
  /// A dead letter deleted with its attempts; false when there is no dead letter of that id.
  virtual void submit_delete_dead_letter(std::string id, callback<bool> done) = 0;
  virtual void submit_counts(callback<status_counts> done) = 0;
  /// Counted by the database on each call (a fleet's tasks, not only this process's).
  virtual void submit_backlog(wall_clock::time_point before, callback<backlog> done) = 0;
  /** Deletes up to `limit` tasks that ended (SUCCEEDED, CANCELLED, EXHAUSTED) before
      `ended_before`, with their attempts: store.retention. Dead letters stay until replayed
      or deleted. The number deleted. */
  virtual void submit_purge(wall_clock::time_point ended_before, std::size_t limit, callback<std::uint64_t> done) = 0;

 protected:
  ~task_queue() = default;
};

/// Retry policies registered through the admin API (POST /policies), shared by a fleet.
class policy_registry {
 public:
  template <class T>
  using callback = store_callback<T>;

  /// Registers `p` once: created, unchanged (the same spec again), or a conflict.
  virtual void submit_put_policy(stored_policy p, callback<policy_put> done) = 0;
  virtual void submit_get_policy(std::string id, callback<std::optional<stored_policy>> done) = 0;

 protected:
  ~policy_registry() = default;
};

/// Idempotency keys of the inbound side (R-6: servers keep keys and answer duplicates).
class key_store {
 public:
  template <class T>
  using callback = store_callback<T>;

  /** Claims `scope_key` for a request whose payload is `fingerprint`, atomically: free (never
      seen, expired, or held by a request whose lease ran out: a crash) becomes held until
      `lease_until`; otherwise what the key holds. */
  virtual void submit_claim_key(std::string scope_key, std::string fingerprint, wall_clock::time_point now,
                                wall_clock::time_point lease_until, callback<key_claim> done) = 0;
  /// Pins the answer of a held key until `expires_at`.
  virtual void submit_complete_key(std::string scope_key, pinned_response r, wall_clock::time_point expires_at,
                                   callback<bool> done) = 0;
  /// Frees a held key whose answer is not kept (5xx, 429, too large): the caller may try again.
  virtual void submit_release_key(std::string scope_key, callback<bool> done) = 0;
  /// Deletes up to `limit` keys that expired before `now`; the number deleted.
  virtual void submit_purge_keys(wall_clock::time_point now, std::size_t limit, callback<std::uint64_t> done) = 0;

 protected:
  ~key_store() = default;
};

/// A store: the three roles over one database, and what /readyz asks of it.
class task_store : public task_queue, public policy_registry, public key_store {
 public:
  template <class T>
  using callback = store_callback<T>;

  virtual ~task_store() = default;

  /// Why the store takes no calls now (its database is unreachable, say); nothing: it does.
  /// /readyz answers 503 with it. Safe from any thread.
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }
  /// Why the store takes no new tasks or keys now (store.max_size reached, the disk full);
  /// nothing: it does. /readyz answers 503 with it. Safe from any thread.
  virtual std::optional<std::string> full() const { return std::nullopt; }
  /// How the store runs when that is not the usual way (a shared store behind a pooler):
  /// /readyz adds it to its 200. Safe from any thread.
  virtual std::optional<std::string> detail() const { return std::nullopt; }
  /** Which store this is, for the `store` label of the metrics that count it: the backend and
      the random id its database was given when it was created ("sqlite/3f9c0a1d2b7e"), never
      a path or a password. Replicas with a file each count apart; instances sharing one
      database count it once. Nothing until it is known (a database not reached yet). Safe
      from any thread. */
  virtual std::optional<std::string> identity() const { return std::nullopt; }
  /** `wake` is called, on a store thread, when tasks became due: `local` once a commit of
      this process's made them due (an accept, a replay), `fleet` when another instance of a
      fleet did (its NOTIFY). The scheduler claims at once instead of at its next poll, which
      behind a pooler (no LISTEN) is a second away. Empty: nobody is called any more. */
  void set_due_listener(std::function<void(due_from)> wake) {
    std::lock_guard lock(due_mutex_);
    due_listener_ = std::move(wake);
  }

 protected:
  /// Tells the listener. Under the lock (the listener only posts), so once
  /// set_due_listener({}) returned no call is left under way into an executor that may be gone.
  void tasks_due(due_from from) {
    std::lock_guard lock(due_mutex_);
    if (due_listener_) due_listener_(from);
  }

 private:
  std::mutex due_mutex_;
  std::function<void(due_from)> due_listener_;
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

/** Any store call as an Asio operation completing with (optional<store_error>, T) on the
    caller's executor: `submit` is given the callback to hand the store. */
template <class T, class Token, class Submit>
auto async_call(Submit submit, Token&& token) {
  return net::async_initiate<Token, void(std::optional<store_error>, T)>(
      [](auto handler, Submit s) { s(back_to<T>(std::move(handler))); }, token, std::move(submit));
}
}  // namespace detail

// Awaitable with `use_tuple`. The arguments are copied into the operation: a caller's
// temporaries may end before the store runs the call.

template <class Token>
auto async_accept(task_queue& s, retry_task task, Token&& token) {
  return detail::async_call<bool>([&s, t = std::move(task)](auto cb) mutable { s.submit_accept(std::move(t), cb); },
                                  token);
}

template <class Token>
auto async_claim(task_queue& s, std::string owner, wall_clock::time_point now, wall_clock::time_point lease_until,
                 std::size_t limit, Token&& token) {
  return detail::async_call<std::vector<retry_task>>(
      [&s, o = std::move(owner), now, lease_until, limit](auto cb) { s.submit_claim(o, now, lease_until, limit, cb); },
      token);
}

template <class Token>
auto async_finish_attempt(task_queue& s, std::string owner, attempt_log attempt, task_status next,
                          wall_clock::time_point next_attempt_at, Token&& token) {
  return detail::async_call<bool>([&s, o = std::move(owner), a = std::move(attempt), next, next_attempt_at](
                                      auto cb) { s.submit_finish_attempt(o, a, next, next_attempt_at, cb); },
                                  token);
}

template <class Token>
auto async_renew_lease(task_queue& s, std::string owner, std::string id, wall_clock::time_point lease_until,
                       Token&& token) {
  return detail::async_call<bool>([&s, o = std::move(owner), i = std::move(id), lease_until](
                                      auto cb) { s.submit_renew_lease(o, i, lease_until, cb); },
                                  token);
}

template <class Token>
auto async_postpone(task_queue& s, std::string owner, std::string id, wall_clock::time_point until, Token&& token) {
  return detail::async_call<bool>(
      [&s, o = std::move(owner), i = std::move(id), until](auto cb) { s.submit_postpone(o, i, until, cb); }, token);
}

template <class Token>
auto async_get(task_queue& s, std::string id, Token&& token) {
  return detail::async_call<std::optional<retry_task>>([&s, i = std::move(id)](auto cb) { s.submit_get(i, cb); },
                                                       token);
}

template <class Token>
auto async_attempts(task_queue& s, std::string id, unsigned after, std::size_t limit, Token&& token) {
  return detail::async_call<std::vector<attempt_log>>(
      [&s, i = std::move(id), after, limit](auto cb) { s.submit_attempts(i, after, limit, cb); }, token);
}

template <class Token>
auto async_list(task_queue& s, task_filter filter, Token&& token) {
  return detail::async_call<std::vector<retry_task>>([&s, f = std::move(filter)](auto cb) { s.submit_list(f, cb); },
                                                     token);
}

template <class Token>
auto async_replay(task_queue& s, std::string id, wall_clock::time_point now, Token&& token) {
  return detail::async_call<bool>([&s, i = std::move(id), now](auto cb) { s.submit_replay(i, now, cb); }, token);
}

template <class Token>
auto async_replay_matching(task_queue& s, task_filter filter, wall_clock::time_point now, Token&& token) {
  return detail::async_call<std::vector<std::string>>(
      [&s, f = std::move(filter), now](auto cb) { s.submit_replay_matching(f, now, cb); }, token);
}

template <class Token>
auto async_cancel(task_queue& s, std::string id, wall_clock::time_point now, Token&& token) {
  return detail::async_call<bool>([&s, i = std::move(id), now](auto cb) { s.submit_cancel(i, now, cb); }, token);
}

template <class Token>
auto async_delete_dead_letter(task_queue& s, std::string id, Token&& token) {
  return detail::async_call<bool>([&s, i = std::move(id)](auto cb) { s.submit_delete_dead_letter(i, cb); }, token);
}

template <class Token>
auto async_counts(task_queue& s, Token&& token) {
  return detail::async_call<status_counts>([&s](auto cb) { s.submit_counts(cb); }, token);
}

template <class Token>
auto async_backlog(task_queue& s, wall_clock::time_point before, Token&& token) {
  return detail::async_call<backlog>([&s, before](auto cb) { s.submit_backlog(before, cb); }, token);
}

template <class Token>
auto async_purge(task_queue& s, wall_clock::time_point ended_before, std::size_t limit, Token&& token) {
  return detail::async_call<std::uint64_t>(
      [&s, ended_before, limit](auto cb) { s.submit_purge(ended_before, limit, cb); }, token);
}

template <class Token>
auto async_claim_key(key_store& s, std::string scope_key, std::string fingerprint, wall_clock::time_point now,
                     wall_clock::time_point lease_until, Token&& token) {
  return detail::async_call<key_claim>([&s, k = std::move(scope_key), f = std::move(fingerprint), now,
                                        lease_until](auto cb) { s.submit_claim_key(k, f, now, lease_until, cb); },
                                       token);
}

template <class Token>
auto async_complete_key(key_store& s, std::string scope_key, pinned_response r, wall_clock::time_point expires_at,
                        Token&& token) {
  return detail::async_call<bool>([&s, k = std::move(scope_key), r = std::move(r),
                                   expires_at](auto cb) { s.submit_complete_key(k, r, expires_at, cb); },
                                  token);
}

template <class Token>
auto async_release_key(key_store& s, std::string scope_key, Token&& token) {
  return detail::async_call<bool>([&s, k = std::move(scope_key)](auto cb) { s.submit_release_key(k, cb); }, token);
}

template <class Token>
auto async_purge_keys(key_store& s, wall_clock::time_point now, std::size_t limit, Token&& token) {
  return detail::async_call<std::uint64_t>([&s, now, limit](auto cb) { s.submit_purge_keys(now, limit, cb); }, token);
}

template <class Token>
auto async_put_policy(policy_registry& s, stored_policy p, Token&& token) {
  return detail::async_call<policy_put>([&s, p = std::move(p)](auto cb) { s.submit_put_policy(p, cb); }, token);
}

template <class Token>
auto async_get_policy(policy_registry& s, std::string id, Token&& token) {
  return detail::async_call<std::optional<stored_policy>>(
      [&s, i = std::move(id)](auto cb) { s.submit_get_policy(i, cb); }, token);
}

}  // namespace rebound::store
