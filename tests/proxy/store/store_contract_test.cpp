// The store contract, once, against both backends: every operation of task_store and the
// task state machine it keeps (claim only when due, leases, cancel only when PENDING, replay
// and delete only when DEAD_LETTERED, keys held then pinned), on a real SQLite file and on a
// real PostgreSQL server (integration/pg_server.cpp; one server per test binary, a fresh
// database per test), and on that server through a real PgBouncer in transaction mode, where
// each transaction may get another server connection. What only one backend has (a file's mode and migrations, SIGKILL; many
// instances, an outage) stays in sqlite_store_test.cpp and postgres_store_test.cpp.
#include "integration/pg_server.hpp"
#include "proxy/store/postgres_store.hpp"
#include "proxy/store/sqlite_store.hpp"
#include "tests/proxy/store/store_calls.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <memory>
#include <thread>
#include <unistd.h>

using namespace rebound::store;
using namespace store_calls;
using namespace std::chrono_literals;

namespace store_contract_test {
namespace {

/// The embedded store on a file of its own.
struct SQLite {
  temp_db db;
  std::unique_ptr<task_store> open() { return std::make_unique<sqlite_store>(db.path()); }
};

/// The shared store on a database of its own, on the server this test binary shares.
struct PostgreSQL {
  std::unique_ptr<task_store> open() {
    auto& server = itest::PgServer::shared();
    postgres_store::options o;
    o.dsn = server.dsn(server.new_database());
    o.password = server.password();
    o.pool = 2;
    auto s = std::make_unique<postgres_store>(o);
    // It connects (and migrates) in the background: a bounded wait, at most 10 s.
    for (int i = 0; i < 1000 && s->unavailable(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(s->unavailable()) << s->unavailable().value_or("");
    EXPECT_FALSE(s->pooled()) << "the server itself is not taken for a pooler";
    return s;
  }
};

/// The shared store through a transaction-mode PgBouncer (one per test binary, in front of
/// the shared server) on a database of its own: found as a pooler, so no prepared statement
/// and no session setting outlives its transaction.
struct PgBouncerTransaction {
  std::unique_ptr<task_store> open() {
    auto& server = itest::PgServer::shared();
    static itest::PgBouncer bouncer(server, 2);
    postgres_store::options o;
    o.dsn = bouncer.dsn(server.new_database());
    o.password = server.password();
    o.pool = 3;  // more clients than the bouncer's two server connections: they are shared
    auto s = std::make_unique<postgres_store>(o);
    for (int i = 0; i < 1000 && s->unavailable(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(s->unavailable()) << s->unavailable().value_or("");
    EXPECT_TRUE(s->pooled()) << "pooler: auto finds the pooler";
    return s;
  }
};

template <class Backend>
class StoreContract : public ::testing::Test {
 protected:
  task_store& store() { return *store_; }

 private:
  Backend backend_;
  std::unique_ptr<task_store> store_ = backend_.open();
};

struct backend_names {
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, SQLite>) return "SQLite";
    return std::is_same_v<T, PostgreSQL> ? "PostgreSQL" : "PgBouncerTransaction";
  }
};

using backends = ::testing::Types<SQLite, PostgreSQL, PgBouncerTransaction>;
TYPED_TEST_SUITE(StoreContract, backends, backend_names);

/// Dead-letters `id` (accepted, claimed and given up on at `at`).
void dead_letter(task_store& s, const std::string& id, wall_clock::time_point at, std::string dependency = "webhooks") {
  auto t = make_task(id, at);
  t.dependency = std::move(dependency);
  ASSERT_TRUE(accept(s, t));
  ASSERT_EQ(claim(s, "w1", at).size(), 1u);
  ASSERT_TRUE(finish(s, "w1", attempt_log{id, 1, at, 400, "", 1ms}, task_status::dead_lettered, at));
}

}  // namespace

TYPED_TEST(StoreContract, ADuplicateIdFailsAloneAndTheRestOfItsGroupCommits) {
  auto& s = this->store();
  ASSERT_TRUE(accept(s, make_task("dup")));
  std::promise<bool> first, second;
  s.submit_accept(make_task("dup"), [&](std::optional<store_error> e, bool ok) { first.set_value(!e && ok); });
  s.submit_accept(make_task("fresh"), [&](std::optional<store_error> e, bool ok) { second.set_value(!e && ok); });
  EXPECT_FALSE(first.get_future().get());
  EXPECT_TRUE(second.get_future().get());
  EXPECT_TRUE(get(s, "fresh"));
}

TYPED_TEST(StoreContract, ATaskIsNotClaimedBeforeItIsDue) {
  auto& s = this->store();
  ASSERT_TRUE(accept(s, make_task("later", t0 + 10s)));
  EXPECT_TRUE(claim(s, "w1", t0 + 9s).empty());
  auto got = claim(s, "w1", t0 + 10s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, task_status::in_flight);
}

TYPED_TEST(StoreContract, AClaimedTaskIsTakenAgainOnlyOnceItsLeaseExpiredWithItsAttemptsKept) {
  auto& s = this->store();
  ASSERT_TRUE(accept(s, make_task("leased")));
  ASSERT_EQ(claim(s, "w1", t0, 30s).size(), 1u);
  ASSERT_TRUE(finish(s, "w1", attempt_log{"leased", 1, t0, 503, "", 2ms}, task_status::pending, t0 + 1s));
  ASSERT_EQ(claim(s, "w1", t0 + 1s, 30s).size(), 1u);  // attempt 2 begins; then w1 crashes
  EXPECT_TRUE(claim(s, "w2", t0 + 20s).empty()) << "w1's lease still runs";
  auto again = claim(s, "w2", t0 + 31s);
  ASSERT_EQ(again.size(), 1u) << "an expired lease makes the task due";
  EXPECT_EQ(again[0].attempts, 1u) << "the attempt count survives the crash";
  EXPECT_FALSE(finish(s, "w1", attempt_log{"leased", 2, t0 + 32s, 200, "", 1ms}, task_status::succeeded, t0))
      << "an owner that lost its lease cannot finish the attempt";
  EXPECT_TRUE(finish(s, "w2", attempt_log{"leased", 2, t0 + 32s, 200, "", 1ms}, task_status::succeeded, t0));
  EXPECT_EQ(get(s, "leased")->status, task_status::succeeded);
}

// Issue 46, defect 7: a delivery that ran past its lease lost the task to another instance, a
// duplicate with a cause. Its owner moves the lease on while the attempt runs.
TYPED_TEST(StoreContract, ALeaseRenewedByItsOwnerKeepsTheTaskFromOthers) {
  auto& s = this->store();
  ASSERT_TRUE(accept(s, make_task("slow")));
  ASSERT_EQ(claim(s, "w1", t0, 30s).size(), 1u);
  auto renew = [&](const std::string& owner, wall_clock::time_point until) {
    auto [e, kept] = wait_for<bool>([&](auto cb) { s.submit_renew_lease(owner, "slow", until, cb); });
    EXPECT_FALSE(e);
    return kept;
  };
  EXPECT_FALSE(renew("w2", t0 + 90s)) << "only the lease's holder renews it";
  EXPECT_TRUE(renew("w1", t0 + 60s));
  EXPECT_TRUE(claim(s, "w2", t0 + 31s).empty()) << "past the first lease, inside the renewed one";
  EXPECT_EQ(claim(s, "w2", t0 + 61s).size(), 1u) << "a holder that stopped renewing loses it";
  EXPECT_FALSE(renew("w1", t0 + 120s)) << "a lost lease is not taken back";
}

// Issue 46, defect 7: the instance that accepted a call waited for its next poll (up to a
// second behind a pooler) to start it. Its own commit tells its scheduler at once.
TYPED_TEST(StoreContract, AnAcceptOrReplayCommittedHereTellsThisProcesssScheduler) {
  auto& s = this->store();
  std::atomic<int> local{0};
  s.set_due_listener([&local](due_from from) {
    if (from == due_from::local) ++local;
  });
  ASSERT_TRUE(accept(s, make_task("told")));
  EXPECT_EQ(local.load(), 1) << "told once the accept committed";
  ASSERT_EQ(claim(s, "w1", t0).size(), 1u);
  ASSERT_TRUE(finish(s, "w1", attempt_log{"told", 1, t0, 503, "", 1ms}, task_status::pending, t0 + 1s));
  EXPECT_EQ(local.load(), 1) << "a retry scheduled for later is the scheduler's own timer, not a wake";
  s.set_due_listener({});
  ASSERT_TRUE(accept(s, make_task("untold")));
  EXPECT_EQ(local.load(), 1) << "nobody is called once the listener is gone";
}

TYPED_TEST(StoreContract, FinishingAnAttemptRecordsItAndSchedulesTheNext) {
  auto& s = this->store();
  ASSERT_TRUE(accept(s, make_task("sched")));
  ASSERT_EQ(claim(s, "w1", t0).size(), 1u);
  ASSERT_TRUE(
      finish(s, "w1", attempt_log{"sched", 1, t0, 0, "connect_refused", 1500us}, task_status::pending, t0 + 5s));
  auto t = get(s, "sched");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, task_status::pending);
  EXPECT_EQ(t->attempts, 1u);
  EXPECT_EQ(t->next_attempt_at, t0 + 5s);
  EXPECT_TRUE(claim(s, "w1", t0 + 4s).empty());
  EXPECT_EQ(claim(s, "w1", t0 + 5s).size(), 1u);
  auto [e, log] = wait_for<std::vector<attempt_log>>([&](auto cb) { s.submit_attempts("sched", 0, 100, cb); });
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].error_type, "connect_refused");
  EXPECT_EQ(log[0].duration, 1500us);
}

TYPED_TEST(StoreContract, AReplayedDeadLetterIsDueAtOnceWithAFreshWindowAndItsHistory) {
  auto& s = this->store();
  ASSERT_TRUE(accept(s, make_task("dl")));
  ASSERT_EQ(claim(s, "w1", t0).size(), 1u);
  ASSERT_TRUE(finish(s, "w1", attempt_log{"dl", 1, t0, 400, "", 1ms}, task_status::dead_lettered, t0));
  auto [e, listed] = wait_for<std::vector<retry_task>>([&](auto cb) { s.submit_list(dead_letters("webhooks"), cb); });
  ASSERT_EQ(listed.size(), 1u);
  auto [e2, none] = wait_for<std::vector<retry_task>>([&](auto cb) { s.submit_list(dead_letters("other"), cb); });
  EXPECT_TRUE(none.empty()) << "filtered by dependency";
  auto [re, replayed] = wait_for<bool>([&](auto cb) { s.submit_replay("dl", t0 + 48h, cb); });
  ASSERT_TRUE(replayed);
  auto [re2, again] = wait_for<bool>([&](auto cb) { s.submit_replay("dl", t0 + 48h, cb); });
  EXPECT_FALSE(again) << "only a dead letter can be replayed";
  auto due = claim(s, "w1", t0 + 48h);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].window_start, t0 + 48h);
  EXPECT_EQ(due[0].attempts_before, 1u);
  auto [le, log] = wait_for<std::vector<attempt_log>>([&](auto cb) { s.submit_attempts("dl", 0, 100, cb); });
  EXPECT_EQ(log.size(), 1u) << "the first round's attempt stays in the log";
}

TYPED_TEST(StoreContract, OnlyAPendingTaskCanBeCancelled) {
  auto& s = this->store();
  ASSERT_TRUE(accept(s, make_task("c1")));
  ASSERT_TRUE(accept(s, make_task("c2")));
  ASSERT_EQ(claim(s, "w1", t0).size(), 2u);
  ASSERT_TRUE(finish(s, "w1", attempt_log{"c1", 1, t0, 503, "", 1ms}, task_status::pending, t0 + 1s));
  auto [e, ok] = wait_for<bool>([&](auto cb) { s.submit_cancel("c1", t0, cb); });
  EXPECT_TRUE(ok);
  EXPECT_EQ(get(s, "c1")->status, task_status::cancelled);
  EXPECT_TRUE(claim(s, "w1", t0 + 2s).empty()) << "a cancelled task is never delivered";
  auto [e2, in_flight] = wait_for<bool>([&](auto cb) { s.submit_cancel("c2", t0, cb); });
  EXPECT_FALSE(in_flight) << "a task in flight cannot be cancelled";
}

TYPED_TEST(StoreContract, AttemptsArePagedByNumber) {
  auto& s = this->store();
  ASSERT_TRUE(accept(s, make_task("many")));
  for (unsigned n = 1; n <= 5; ++n) {
    ASSERT_EQ(claim(s, "w1", t0 + std::chrono::seconds(n)).size(), 1u);
    ASSERT_TRUE(finish(s, "w1", attempt_log{"many", n, t0, 503, "", 1ms}, task_status::pending,
                       t0 + std::chrono::seconds(n + 1)));
  }
  auto [e, first] = wait_for<std::vector<attempt_log>>([&](auto cb) { s.submit_attempts("many", 0, 2, cb); });
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[1].number, 2u);
  auto [e2, rest] = wait_for<std::vector<attempt_log>>([&](auto cb) { s.submit_attempts("many", 4, 2, cb); });
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].number, 5u);
}

TYPED_TEST(StoreContract, R8_BulkReplayTakesTheDeadLettersOfItsFilterOnly) {
  auto& s = this->store();
  dead_letter(s, "a1", t0);
  dead_letter(s, "a2", t0 + 10s);
  dead_letter(s, "b1", t0 + 10s, "billing");
  task_filter f;
  f.dependency = "webhooks";
  f.since = t0 + 5s;
  auto [e, ids] = wait_for<std::vector<std::string>>([&](auto cb) { s.submit_replay_matching(f, t0 + 1h, cb); });
  ASSERT_FALSE(e);
  EXPECT_EQ(ids, std::vector<std::string>{"a2"});
  EXPECT_EQ(get(s, "a2")->status, task_status::pending);
  EXPECT_EQ(get(s, "a1")->status, task_status::dead_lettered) << "dead-lettered before `since`";
  EXPECT_EQ(get(s, "b1")->status, task_status::dead_lettered) << "another dependency";
}

TYPED_TEST(StoreContract, ADeletedDeadLetterIsGoneWithItsAttemptsAndNothingElseCanBeDeleted) {
  auto& s = this->store();
  dead_letter(s, "gone", t0);
  ASSERT_TRUE(accept(s, make_task("waiting")));
  auto [e, deleted] = wait_for<bool>([&](auto cb) { s.submit_delete_dead_letter("gone", cb); });
  EXPECT_TRUE(deleted);
  EXPECT_FALSE(get(s, "gone"));
  auto [le, log] = wait_for<std::vector<attempt_log>>([&](auto cb) { s.submit_attempts("gone", 0, 10, cb); });
  EXPECT_TRUE(log.empty());
  auto [e2, pending] = wait_for<bool>([&](auto cb) { s.submit_delete_dead_letter("waiting", cb); });
  EXPECT_FALSE(pending) << "only a dead letter can be deleted";
  EXPECT_TRUE(get(s, "waiting"));
}

TYPED_TEST(StoreContract, ARefusedDeleteLeavesTheTasksAttemptsAsTheyWere) {
  // SQLite deletes a task's attempts before the task (no cascade): a task that turns out not
  // to be a dead letter must get them back with the undo of that call alone.
  auto& s = this->store();
  ASSERT_TRUE(accept(s, make_task("retrying")));
  ASSERT_EQ(claim(s, "w1", t0).size(), 1u);
  ASSERT_TRUE(finish(s, "w1", attempt_log{"retrying", 1, t0, 503, "", 900us}, task_status::pending, t0 + 5s));
  auto [e, deleted] = wait_for<bool>([&](auto cb) { s.submit_delete_dead_letter("retrying", cb); });
  EXPECT_FALSE(e);
  EXPECT_FALSE(deleted);
  auto [le, log] = wait_for<std::vector<attempt_log>>([&](auto cb) { s.submit_attempts("retrying", 0, 10, cb); });
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].status, 503u);
  EXPECT_EQ(log[0].duration, 900us);
}

TYPED_TEST(StoreContract, APolicyIsRegisteredOnceByIdAndADifferentTextUnderItsIdConflicts) {
  auto& s = this->store();
  auto put = [&](std::string spec) {
    auto [e, r] = wait_for<policy_put>([&](auto cb) { s.submit_put_policy({"slow", spec, t0}, cb); });
    EXPECT_FALSE(e);
    return r;
  };
  EXPECT_EQ(put("{\"max_retries\": 5}"), policy_put::created);
  EXPECT_EQ(put("{\"max_retries\": 5}"), policy_put::unchanged);
  EXPECT_EQ(put("{\"max_retries\": 6}"), policy_put::conflict);
  auto [e, p] = wait_for<std::optional<stored_policy>>([&](auto cb) { s.submit_get_policy("slow", cb); });
  ASSERT_TRUE(p);
  EXPECT_EQ(p->spec, "{\"max_retries\": 5}");
}

TYPED_TEST(StoreContract, EndedTasksArePurgedAfterTheirRetentionButDeadLettersStay) {
  auto& s = this->store();
  for (auto id : {"old", "new", "dead"}) ASSERT_TRUE(accept(s, make_task(id)));
  ASSERT_EQ(claim(s, "w1", t0).size(), 3u);
  ASSERT_TRUE(finish(s, "w1", attempt_log{"old", 1, t0, 200, "", 1ms}, task_status::succeeded, t0));
  ASSERT_TRUE(finish(s, "w1", attempt_log{"new", 1, t0, 200, "", 1ms}, task_status::succeeded, t0 + 2h));
  ASSERT_TRUE(finish(s, "w1", attempt_log{"dead", 1, t0, 400, "", 1ms}, task_status::dead_lettered, t0));
  auto [e, purged] = wait_for<std::uint64_t>([&](auto cb) { s.submit_purge(t0 + 1h, 100, cb); });
  ASSERT_FALSE(e);
  EXPECT_EQ(purged, 1u);
  EXPECT_FALSE(get(s, "old"));
  EXPECT_TRUE(get(s, "new")) << "ended within the retention";
  EXPECT_TRUE(get(s, "dead")) << "a dead letter waits for a person (R-8)";
  auto [le, log] = wait_for<std::vector<attempt_log>>([&](auto cb) { s.submit_attempts("old", 0, 10, cb); });
  EXPECT_TRUE(log.empty()) << "its attempts went with it";
  EXPECT_EQ(count(s, task_status::succeeded), 1u);
}

TYPED_TEST(StoreContract, R6_AKeyIsClaimedOnceThenInFlightThenReplayedOrAMismatch) {
  auto& s = this->store();
  EXPECT_EQ(claim_key(s, "k", "h1", t0).state, key_state::claimed);
  EXPECT_EQ(claim_key(s, "k", "h1", t0 + 1s).state, key_state::in_flight);
  EXPECT_EQ(claim_key(s, "k", "h2", t0 + 1s).state, key_state::mismatch);
  pinned_response const r{201, {{"Content-Type", "application/json"}}, "{\"id\":1}"};
  auto [e, done] = wait_for<bool>([&](auto cb) { s.submit_complete_key("k", r, t0 + 24h, cb); });
  ASSERT_TRUE(done);
  auto const replay = claim_key(s, "k", "h1", t0 + 2s);
  ASSERT_EQ(replay.state, key_state::replay);
  EXPECT_EQ(replay.response.status, 201u);
  EXPECT_EQ(replay.response.body, "{\"id\":1}");
  EXPECT_EQ(replay.response.headers, r.headers);
  EXPECT_EQ(claim_key(s, "k", "h2", t0 + 2s).state, key_state::mismatch);
  EXPECT_EQ(claim_key(s, "k", "h2", t0 + 25h).state, key_state::claimed) << "an expired key is free again";
}

TYPED_TEST(StoreContract, R6_AKeyWhoseHolderDiedIsFreeOnceItsLeaseRanOutAndAReleasedOneAtOnce) {
  auto& s = this->store();
  EXPECT_EQ(claim_key(s, "crashed", "h", t0).state, key_state::claimed);
  EXPECT_EQ(claim_key(s, "crashed", "h", t0 + 29s).state, key_state::in_flight);
  EXPECT_EQ(claim_key(s, "crashed", "h", t0 + 31s).state, key_state::claimed);
  EXPECT_EQ(claim_key(s, "failed", "h", t0).state, key_state::claimed);
  auto [e, released] = wait_for<bool>([&](auto cb) { s.submit_release_key("failed", cb); });
  EXPECT_TRUE(released);
  EXPECT_EQ(claim_key(s, "failed", "h", t0 + 1s).state, key_state::claimed) << "a 5xx is not pinned";
}

TYPED_TEST(StoreContract, R6_ExpiredKeysArePurged) {
  auto& s = this->store();
  for (auto k : {"old", "new"}) ASSERT_EQ(claim_key(s, k, "h", t0).state, key_state::claimed);
  auto [e1, a] = wait_for<bool>([&](auto cb) { s.submit_complete_key("old", {200, {}, ""}, t0 + 1h, cb); });
  auto [e2, b] = wait_for<bool>([&](auto cb) { s.submit_complete_key("new", {200, {}, ""}, t0 + 48h, cb); });
  auto [e, purged] = wait_for<std::uint64_t>([&](auto cb) { s.submit_purge_keys(t0 + 2h, 100, cb); });
  EXPECT_EQ(purged, 1u);
  EXPECT_EQ(claim_key(s, "new", "h", t0 + 3h).state, key_state::replay);
}

TYPED_TEST(StoreContract, ACancelledTaskIsPurgedARetentionAfterItsCancelNotItsPendingRetry) {
  auto& s = this->store();
  ASSERT_TRUE(accept(s, make_task("later", t0 + 4h)));
  auto [e, ok] = wait_for<bool>([&](auto cb) { s.submit_cancel("later", t0, cb); });
  ASSERT_FALSE(e);
  ASSERT_TRUE(ok);
  auto [pe, purged] = wait_for<std::uint64_t>([&](auto cb) { s.submit_purge(t0 + 1h, 100, cb); });
  ASSERT_FALSE(pe);
  EXPECT_EQ(purged, 1u) << "a retention of 1 h after the cancel at t0";
  EXPECT_FALSE(get(s, "later"));
}

TYPED_TEST(StoreContract, CountsByStatusFollowEveryMove) {
  auto& s = this->store();
  for (auto id : {"a", "b", "c", "d"}) ASSERT_TRUE(accept(s, make_task(id)));
  EXPECT_EQ(count(s, task_status::pending), 4u);
  ASSERT_EQ(claim(s, "w1", t0).size(), 4u);
  EXPECT_EQ(count(s, task_status::pending), 0u);
  EXPECT_EQ(count(s, task_status::in_flight), 4u);
  ASSERT_TRUE(finish(s, "w1", attempt_log{"a", 1, t0, 200, "", 1ms}, task_status::succeeded, t0));
  ASSERT_TRUE(finish(s, "w1", attempt_log{"b", 1, t0, 400, "", 1ms}, task_status::dead_lettered, t0));
  ASSERT_TRUE(finish(s, "w1", attempt_log{"c", 1, t0, 503, "", 1ms}, task_status::pending, t0 + 1s));
  EXPECT_FALSE(finish(s, "other", attempt_log{"d", 1, t0, 200, "", 1ms}, task_status::succeeded, t0))
      << "a refused call moves nothing";
  auto [e, ok] = wait_for<bool>([&](auto cb) { s.submit_cancel("c", t0, cb); });
  ASSERT_TRUE(ok);
  EXPECT_EQ(count(s, task_status::succeeded), 1u);
  EXPECT_EQ(count(s, task_status::dead_lettered), 1u);
  EXPECT_EQ(count(s, task_status::cancelled), 1u);
  EXPECT_EQ(count(s, task_status::in_flight), 1u);
}

TYPED_TEST(StoreContract, Seed003_TheBacklogCountsUnendedTasksByWhenTheirWindowStarted) {
  auto& s = this->store();
  auto backlog_before = [&](wall_clock::time_point before) {
    auto [e, b] = wait_for<backlog>([&](auto cb) { s.submit_backlog(before, cb); });
    EXPECT_FALSE(e);
    return b;
  };
  EXPECT_FALSE(backlog_before(t0).oldest) << "no task, no oldest";
  ASSERT_TRUE(accept(s, make_task("old")));
  auto young = make_task("young", t0 + 25h);
  young.created_at = t0 + 25h;
  ASSERT_TRUE(accept(s, young));
  auto dead = make_task("dead");
  ASSERT_TRUE(accept(s, dead));
  ASSERT_EQ(claim(s, "w1", t0).size(), 2u);  // old and dead: young is not due yet
  ASSERT_TRUE(finish(s, "w1", attempt_log{"dead", 1, t0, 400, "", 1ms}, task_status::dead_lettered, t0));

  auto b = backlog_before(t0 + 24h);
  EXPECT_EQ(b.started_before, 1u) << "old, in flight, counts; the dead letter has ended";
  ASSERT_TRUE(b.oldest);
  EXPECT_EQ(*b.oldest, t0);

  ASSERT_TRUE(finish(s, "w1", attempt_log{"old", 1, t0, 200, "", 1ms}, task_status::succeeded, t0));
  auto [re, replayed] = wait_for<bool>([&](auto cb) { s.submit_replay("dead", t0 + 48h, cb); });
  ASSERT_TRUE(replayed);
  b = backlog_before(t0 + 26h);
  EXPECT_EQ(b.started_before, 1u) << "young; the replayed letter's window started at its replay";
  ASSERT_TRUE(b.oldest);
  EXPECT_EQ(*b.oldest, t0 + 25h);
}

}  // namespace store_contract_test
