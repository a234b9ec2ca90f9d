#include "proxy/store/postgres_store.hpp"

#include "proxy/store/postgres_connection.hpp"
#include "proxy/store/store_support.hpp"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <random>

namespace rebound::store {

namespace {
/// The channel a commit that made tasks due NOTIFYs, and the listener LISTENs on.
constexpr const char* due_channel = "rebound_tasks_due";
}  // namespace

using detail::pg_connection;

postgres_store::postgres_store(options o) : sql_store(sql::dialect::postgres), options_(std::move(o)) {
  if (options_.pooler == pooler_mode::transaction) note_pooled("store.pooler: transaction");
  unsigned const n = std::max(1u, options_.pool);
  for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this, i] { serve(i); });
  if (options_.pooler != pooler_mode::transaction) threads_.emplace_back([this] { listen(); });
}

postgres_store::~postgres_store() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  closing_ = true;
  wake_.notify_all();
  stop_.notify_all();
  for (auto& t : threads_) t.join();
  // Calls no connection could take (the database was down to the end) fail rather than vanish.
  for (auto& j : queue_) j.fail(store_error{"the store is closing"});
}

/// A call's view of a store thread's connection. A failed statement aborts the transaction
/// (the connection says so: c.failed); run_group then runs each call of the group alone.
class postgres_store::session final : public sql::session {
 public:
  session(postgres_store& store, pg_connection& c) : store_(store), c_(c) {}

  std::string error() const override { return c_.error; }
  void made_due() override { c_.notify = true; }
  bool full() override { return store_.guard_.full().has_value(); }
  std::optional<store_error> refuse_new() override { return store_.refuse_new(c_); }
  bool keep_size_current() override {
    store_.measure(c_);
    return !c_.failed;
  }

 private:
  std::optional<sql::rows> run_values(const std::string& sql, std::span<const sql::value> params) override {
    std::vector<detail::param> values;
    values.reserve(params.size());
    for (auto const& v : params) {
      if (v.type == sql::value::kind::number)
        values.push_back(detail::number(v.number));
      else if (v.type == sql::value::kind::bytes)
        values.push_back(detail::bytes(v.chars));
      else
        values.push_back(detail::text(v.chars));
    }
    auto r = c_.run(sql, values);
    if (c_.failed) return std::nullopt;
    sql::rows out;
    int const width = PQnfields(r.raw());
    for (int row = 0; row < r.rows(); ++row) {
      std::vector<sql::rows::cell> cells(static_cast<std::size_t>(width));
      for (int col = 0; col < width; ++col) {
        if (PQgetisnull(r.raw(), row, col)) continue;
        auto const type = PQftype(r.raw(), col);
        // int8, int2, int4 (pg_type.h): the integers of the schema, sent in binary.
        if (type == 20 || type == 21 || type == 23)
          cells[static_cast<std::size_t>(col)] = r.integer(row, col);
        else
          cells[static_cast<std::size_t>(col)] = r.text(row, col);
      }
      out.add_row(std::move(cells));
    }
    out.set_changes(r.changes());
    return out;
  }

  postgres_store& store_;
  pg_connection& c_;
};

std::optional<std::string> postgres_store::unavailable() const {
  std::lock_guard lock(mutex_);
  if (connected_ > 0) return std::nullopt;
  return down_reason_;
}

void postgres_store::enqueue(call j) {
  {
    std::unique_lock lock(mutex_);
    if (connected_ == 0) {
      // Nothing can be made durable now: fail at once (an accept answers 503), never wait
      // for a database that may stay away longer than the caller.
      auto const why = store_error{"store unavailable: " + down_reason_};
      lock.unlock();
      j.fail(why);
      return;
    }
    queue_.push_back(std::move(j));
  }
  wake_.notify_one();
}

void postgres_store::requeue(std::vector<call>& jobs) {
  {
    std::lock_guard lock(mutex_);
    for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) queue_.push_front(std::move(*it));
  }
  jobs.clear();
  wake_.notify_one();
}

bool postgres_store::pause(std::chrono::milliseconds d) {
  std::unique_lock lock(mutex_);
  return !stop_.wait_for(lock, d, [this] { return stopping_; });
}

void postgres_store::connection_up() {
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    first = connected_++ == 0;
  }
  if (first && options_.on_state) options_.on_state("");
}

void postgres_store::connection_lost(const std::string& why) {
  std::deque<call> orphans;
  bool last = false;
  {
    std::lock_guard lock(mutex_);
    down_reason_ = why;
    if (connected_ > 0 && --connected_ == 0) {
      last = true;
      orphans.swap(queue_);  // no connection is left to take them
    }
  }
  for (auto& j : orphans) j.fail(store_error{"store unavailable: " + why});
  if (last && options_.on_state) options_.on_state(why);
}

namespace {
/// How many queued calls one transaction carries at most.
constexpr std::size_t max_group = 256;

/// A wait drawn from [d/2, d]: instances of a fleet that lost the database together do not
/// come back in step.
std::chrono::milliseconds jittered(std::chrono::milliseconds d, std::minstd_rand& rng) {
  std::uniform_int_distribution<std::int64_t> pick(d.count() / 2, d.count());
  return std::chrono::milliseconds(pick(rng));
}
}  // namespace

void postgres_store::serve(unsigned index) {
  pg_connection c;
  c.closing = &closing_;
  c.answer_within = options_.answer_within;
  std::minstd_rand rng(static_cast<std::minstd_rand::result_type>(
      std::chrono::steady_clock::now().time_since_epoch().count() + index));
  auto wait = options_.reconnect_min;
  std::vector<call> jobs;
  for (;;) {
    if (!c.up()) {
      if (c.counted) {
        // Once at once, still counted: after a server restart every idle connection is
        // stale, and one reconnect is all each needs.
        if (connect(c, true)) continue;
        c.counted = false;
        connection_lost(c.error);
      }
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
      }
      if (connect(c, true)) {
        c.counted = true;
        wait = options_.reconnect_min;
        connection_up();
      } else {
        {
          std::lock_guard lock(mutex_);
          if (connected_ == 0) down_reason_ = c.error;
        }
        if (!pause(jittered(wait, rng))) return;
        wait = std::min(wait * 2, options_.reconnect_max);
        continue;
      }
    }
    jobs.clear();
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping, and nothing left to do
      while (!queue_.empty() && jobs.size() < max_group) {
        jobs.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    run_group(c, jobs);
  }
  if (c.counted) {
    std::lock_guard lock(mutex_);
    --connected_;
  }
}

void postgres_store::run_group(pg_connection& c, std::vector<call>& jobs) {
  auto fail_all = [&jobs](std::size_t from, const std::string& why) {
    for (auto i = from; i < jobs.size(); ++i) jobs[i].fail(store_error{why});
  };
  // Everything that queued while the last transaction was on its way goes in one.
  std::vector<support::reply> replies;
  session calls(*this, c);
  c.failed = false;
  c.notify = false;
  c.unnamed = c.unnamed || pooled_.load();
  if (!c.begin()) {
    if (c.lost) {
      // Nothing of theirs reached the server: an idle connection the server dropped (it
      // restarted) is found out here, and its calls go to one that works, or to this one
      // once reconnected, rather than fail.
      requeue(jobs);
      return;
    }
    return fail_all(0, "store unavailable: " + c.error);
  }
  for (auto& j : jobs) {
    replies.push_back(j.run(calls));
    if (c.failed) break;
  }
  if (!c.failed) {
    bool const due = c.notify;
    if (due) c.command((std::string("NOTIFY ") + due_channel).c_str());
    auto const started = std::chrono::steady_clock::now();
    if (!c.failed && c.command("COMMIT")) {
      commits_.fetch_add(1, std::memory_order_relaxed);
      if (options_.on_commit) options_.on_commit(std::chrono::steady_clock::now() - started, jobs.size());
      if (due) tasks_due(due_from::local);  // this instance starts what it accepted itself
      for (auto& r : replies) r(std::nullopt);
      return;
    }
  }
  // A COMMIT whose answer was lost may have committed: the callers hear a failure, and an
  // accept that did commit is delivered anyway (at least once), never the reverse.
  if (c.lost) return fail_all(0, "store unavailable: " + c.error);
  c.failed = false;
  c.command("ROLLBACK");
  if (c.clashed) {
    // A pooler detection missed (or `pooler: none` put in front of one): from now on, and
    // for the calls below, statements go unnamed.
    c.clashed = false;
    c.unnamed = true;
    note_pooled("a prepared statement was missing or already there: another client used its server connection");
  }
  // One call failed and PostgreSQL aborted the transaction for all: each again in its own,
  // so the one that failed fails alone.
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    c.failed = false;
    c.notify = false;
    if (!c.begin()) return fail_all(i, "store unavailable: " + c.error);
    auto r = jobs[i].run(calls);
    if (c.failed) {
      if (c.lost) return fail_all(i, "store unavailable: " + c.error);
      c.failed = false;
      c.command("ROLLBACK");
      r(std::nullopt);  // the reply carries the statement's error
    } else {
      bool const due = c.notify;
      if (due) c.command((std::string("NOTIFY ") + due_channel).c_str());
      if (!c.failed && c.command("COMMIT")) {
        commits_.fetch_add(1, std::memory_order_relaxed);
        if (due) tasks_due(due_from::local);
        r(std::nullopt);
      } else {
        r(store_error{"commit failed: " + c.error});
        if (c.lost) return fail_all(i + 1, "store unavailable: " + c.error);
        c.failed = false;
        c.command("ROLLBACK");
      }
    }
  }
}

void postgres_store::listen() {
  pg_connection c;
  c.closing = &closing_;
  c.answer_within = options_.answer_within;
  std::minstd_rand rng(static_cast<std::minstd_rand::result_type>(
      std::chrono::steady_clock::now().time_since_epoch().count()));
  auto wait = options_.reconnect_min;
  auto wake_scheduler = [this] { tasks_due(due_from::fleet); };
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    if (!c.up()) {
      bool const connected = connect(c, false);
      if (connected && pooled_.load()) {
        // A transaction-mode pooler takes LISTEN and then hands its server connection to
        // others: nothing would ever arrive. The scheduler's poll is the wake-up instead.
        c.close();
        return;
      }
      if (!connected || !c.command((std::string("LISTEN ") + due_channel).c_str())) {
        c.close();
        if (!pause(jittered(wait, rng))) return;
        wait = std::min(wait * 2, options_.reconnect_max);
        continue;
      }
      wait = options_.reconnect_min;
      wake_scheduler();  // tasks may have become due while nobody listened
      listening_ = true;
    }
    // Short polls, so a closing store is not held up by an idle database.
    pollfd fd{PQsocket(c.raw), POLLIN, 0};
    if (::poll(&fd, 1, 250) < 0) continue;
    if (!PQconsumeInput(c.raw) || PQstatus(c.raw) == CONNECTION_BAD) {
      listening_ = false;
      c.close();
      continue;
    }
    bool due = false;
    while (PGnotify* n = PQnotifies(c.raw)) {
      due = true;
      PQfreemem(n);
    }
    if (due) wake_scheduler();
  }
}

void postgres_store::measure(pg_connection& c) {
  using namespace std::chrono;
  auto const now = duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
  auto last = measured_at_ms_.load(std::memory_order_relaxed);
  if (now - last < 5000 || !measured_at_ms_.compare_exchange_strong(last, now)) return;
  auto r = c.run("SELECT pg_database_size(current_database())", {});
  // A failed measure fails the call it rode with (the transaction is aborted): rare, and
  // the call is answered as any store failure is.
  if (!c.failed && r.rows() > 0) guard_.measured(static_cast<std::uint64_t>(r.integer(0, 0)));
}

std::optional<store_error> postgres_store::refuse_new(pg_connection& c) {
  measure(c);
  if (c.failed) return store_error{c.error};
  return guard_.refuse_new();
}

}  // namespace rebound::store
