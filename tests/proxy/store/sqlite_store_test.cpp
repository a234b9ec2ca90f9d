// The embedded store on a real SQLite file: durability (reopened, and across SIGKILL), group
// commit, leases, attempt records, schema versions, file mode.
#include "proxy/store/sqlite_store.hpp"

#include "tests/proxy/store/store_calls.hpp"

#include <sqlite3.h>

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace rebound::store;
using namespace store_calls;
using namespace std::chrono_literals;

TEST(Store, AnAcceptedTaskIsReadBackWholeAfterReopening) {
  temp_db db;
  {
    sqlite_store s(db.path());
    ASSERT_TRUE(accept(s, make_task("a1")));
  }
  sqlite_store s(db.path());
  auto t = get(s, "a1");
  ASSERT_TRUE(t);
  auto const want = make_task("a1");
  EXPECT_EQ(t->idempotency_key, want.idempotency_key);
  EXPECT_EQ(t->method, "POST");
  EXPECT_EQ(t->target, want.target);
  EXPECT_EQ(t->headers, want.headers) << "headers, the app's credential included, are kept for the delivery";
  EXPECT_EQ(t->body, want.body);
  EXPECT_EQ(t->next_attempt_at, t0);
  EXPECT_EQ(t->status, task_status::pending);
  EXPECT_FALSE(get(s, "missing"));
}

TEST(Store, TheFileIsCreatedReadableByItsOwnerOnly) {
  temp_db db;
  sqlite_store s(db.path());
  struct stat st {};
  ASSERT_EQ(::stat(db.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(Store, AcceptsThatArriveTogetherAreCommittedTogether) {
  temp_db db;
  sqlite_store s(db.path());
  constexpr int n = 400;
  std::vector<std::promise<bool>> done(n);
  for (int i = 0; i < n; ++i)
    s.submit_accept(make_task("g" + std::to_string(i)),
                    [&done, i](std::optional<store_error> e, bool ok) { done[i].set_value(!e && ok); });
  for (auto& d : done) ASSERT_TRUE(d.get_future().get());
  EXPECT_EQ(count(s, task_status::pending), static_cast<std::uint64_t>(n));
  EXPECT_LT(s.commits(), static_cast<std::uint64_t>(n) / 4) << "one fsync per task caps the accept rate";
}

TEST(Store, ASecondStoreOnTheSameFileIsRefused) {
  temp_db db;
  sqlite_store s(db.path());
  ASSERT_TRUE(accept(s, make_task("held")));  // the first write takes the lock
  EXPECT_THROW(sqlite_store second(db.path()), std::runtime_error);
}

TEST(Store, ATaskInFlightWhenItsProcessDiedIsDueAtOnceAfterReopening) {
  temp_db db;
  {
    sqlite_store s(db.path());
    ASSERT_TRUE(accept(s, make_task("orphan")));
    ASSERT_EQ(claim(s, "dead-process", t0, std::chrono::hours(1)).size(), 1u);
  }
  sqlite_store s(db.path());
  auto again = claim(s, "new-process", t0 + 1s);
  ASSERT_EQ(again.size(), 1u) << "the dead owner's hour-long lease is not waited out";
  EXPECT_EQ(again[0].id, "orphan");
}

TEST(Store, AVersionOneFileIsMigratedAtOpenAndItsTasksKept) {
  temp_db db;
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.path().c_str(), &raw), SQLITE_OK);
  // Schema version 1 as the first release wrote it, with one task in it.
  ASSERT_EQ(sqlite3_exec(raw, R"sql(
CREATE TABLE retry_tasks (id TEXT PRIMARY KEY, idempotency_key TEXT NOT NULL, dependency TEXT NOT NULL,
  method TEXT NOT NULL, target TEXT NOT NULL, headers BLOB NOT NULL, body BLOB NOT NULL, policy_id TEXT NOT NULL,
  attempts INTEGER NOT NULL, next_attempt_at INTEGER NOT NULL, created_at INTEGER NOT NULL, status TEXT NOT NULL,
  lease_owner TEXT, lease_expires INTEGER);
CREATE TABLE attempt_logs (task_id TEXT NOT NULL, number INTEGER NOT NULL, at INTEGER NOT NULL, status INTEGER NOT NULL,
  error_type TEXT NOT NULL, duration_us INTEGER NOT NULL, PRIMARY KEY (task_id, number));
INSERT INTO retry_tasks VALUES ('old', 'k', 'hooks', 'POST', 'http://h/x', x'', x'', '', 2, 1800000000000,
  1700000000000, 'DEAD_LETTERED', NULL, NULL);
PRAGMA user_version = 1;
)sql",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  sqlite_store s(db.path());
  auto t = get(s, "old");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->attempts, 2u);
  EXPECT_EQ(t->window_start, t->created_at) << "a version-1 task's window starts at its accept";
  EXPECT_EQ(t->attempts_before, 0u);
}

// Issue 48: replicas with a file each must count apart in the metrics, and a restart must not
// start a new series: the id is made with the file and kept in it, never its path.
TEST(Store, TheIdentityIsMadeWithTheFileKeptAcrossReopeningAndOwnToEachFile) {
  temp_db db;
  temp_db other;
  std::string first;
  {
    sqlite_store s(db.path());
    ASSERT_TRUE(s.identity());
    first = *s.identity();
  }
  EXPECT_TRUE(std::regex_match(first, std::regex("sqlite/[0-9a-f]{12}"))) << first;
  EXPECT_EQ(sqlite_store(db.path()).identity(), first);
  EXPECT_NE(sqlite_store(other.path()).identity(), first);
  // Not a migration: the schema version an older rebound checks for is unchanged, so rolling
  // back to it keeps the file usable.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.path().c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* v = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw, "PRAGMA user_version", -1, &v, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(v), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(v, 0), sqlite_store::schema_version);
  EXPECT_EQ(sqlite_store::schema_version, 4);
  sqlite3_finalize(v);
  sqlite3_close(raw);
}

TEST(Store, ClaimsAndAttemptRecordsThatArriveTogetherShareACommit) {
  temp_db db;
  sqlite_store s(db.path());
  constexpr int n = 200;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(accept(s, make_task("d" + std::to_string(i))));
  ASSERT_EQ(claim(s, "w1", t0).size(), 100u);
  auto const before = s.commits();
  std::vector<std::promise<bool>> done(100);
  for (int i = 0; i < 100; ++i)
    s.submit_finish_attempt("w1", attempt_log{"d" + std::to_string(i), 1, t0, 200, "", 1ms}, task_status::succeeded, t0,
                            [&done, i](std::optional<store_error> e, bool ok) { done[i].set_value(!e && ok); });
  for (auto& d : done) ASSERT_TRUE(d.get_future().get());
  EXPECT_LT(s.commits() - before, 25u) << "one fsync per attempt record caps the delivery rate";
  EXPECT_EQ(count(s, task_status::succeeded), 100u);
}

TEST(Store, CountsByStatusAreRecountedAtOpen) {
  temp_db db;
  {
    sqlite_store s(db.path());
    for (auto id : {"a", "b", "c"}) ASSERT_TRUE(accept(s, make_task(id)));
    ASSERT_EQ(claim(s, "w1", t0).size(), 3u);
    ASSERT_TRUE(finish(s, "w1", attempt_log{"a", 1, t0, 200, "", 1ms}, task_status::succeeded, t0));
    ASSERT_TRUE(finish(s, "w1", attempt_log{"b", 1, t0, 400, "", 1ms}, task_status::dead_lettered, t0));
  }
  sqlite_store s(db.path());
  EXPECT_EQ(count(s, task_status::succeeded), 1u);
  EXPECT_EQ(count(s, task_status::dead_lettered), 1u);
  EXPECT_EQ(count(s, task_status::in_flight), 1u);
}

TEST(Store, AFileWithANewerSchemaIsRefusedAtOpen) {
  temp_db db;
  { sqlite_store s(db.path()); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.path().c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  try {
    sqlite_store s(db.path());
    FAIL() << "opened a schema it does not know";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
  }
}

TEST(Store, AFileThatIsNotADatabaseIsRefusedAtOpen) {
  temp_db db;
  std::ofstream(db.path()) << std::string(8192, 'x');
  EXPECT_THROW(sqlite_store s(db.path()), std::runtime_error);
}

// R-8's first half: a task the store said it committed is there after the process dies at
// any moment. A child process accepts tasks as fast as it can and reports each committed id
// down a pipe; it is killed with SIGKILL mid-stream, and every reported id must be found.
TEST(Store, R8_EveryCommittedTaskSurvivesSigkill) {
  temp_db db;
  for (int round = 0; round < 5; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t const child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      sqlite_store s(db.path());
      for (int i = 0;; ++i) {
        auto const id = "r" + std::to_string(round) + "-" + std::to_string(i);
        auto [e, ok] = wait_for<bool>([&](auto cb) { s.submit_accept(make_task(id), cb); });
        if (e || !ok) ::_exit(3);
        auto const line = id + "\n";
        if (::write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(4);
      }
    }
    ::close(fds[1]);
    std::string acked;
    char buf[4096];
    auto const until = std::chrono::steady_clock::now() + 150ms + std::chrono::milliseconds(37 * round);
    while (std::chrono::steady_clock::now() < until) {
      auto const n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      acked.append(buf, static_cast<std::size_t>(n));
    }
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    // Ids acknowledged after the last read still count: read what the pipe holds.
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) acked.append(buf, static_cast<std::size_t>(n));
    ::close(fds[0]);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child ended on its own: " << status;

    sqlite_store s(db.path());
    std::size_t checked = 0;
    for (std::size_t at = 0, nl; (nl = acked.find('\n', at)) != std::string::npos; at = nl + 1, ++checked) {
      auto const id = acked.substr(at, nl - at);
      ASSERT_TRUE(get(s, id)) << "task " << id << " was reported committed and is gone after SIGKILL";
    }
    EXPECT_GT(checked, 0u) << "round " << round << " committed nothing before the kill";
  }
}

// Issue 29, defect 15: nothing bounded the store (498 MiB of tasks in 20 s through the API).
// Past store.max_size a new task is refused as full (507 upstream of here), the first refusal
// marked for the log; once delivered tasks are purged, the room is back by itself.
TEST(Store, PastMaxSizeNewTasksAreRefusedAsFullUntilPurgingMakesRoom) {
  temp_db db;
  sqlite_store s(db.path(), {}, 1u << 20);
  EXPECT_FALSE(s.full());
  auto big = [](int i) {
    auto t = make_task("big-" + std::to_string(i));
    t.body = std::string(64 * 1024, 'x');
    return t;
  };
  int accepted = 0;
  std::optional<store_error> refused;
  for (int i = 0; i < 64 && !refused; ++i) {
    auto [e, ok] = wait_for<bool>([&](auto cb) { s.submit_accept(big(i), cb); });
    if (e)
      refused = e;
    else
      accepted += ok;
  }
  ASSERT_TRUE(refused) << "64 x 64 KiB went into a 1 MiB store";
  EXPECT_TRUE(refused->full) << refused->message;
  EXPECT_TRUE(refused->first);
  EXPECT_GE(accepted, 10) << "about 1 MiB of tasks fits";
  EXPECT_LE(accepted, 16);
  ASSERT_TRUE(s.full());
  EXPECT_NE(s.full()->find("store.max_size"), std::string::npos) << *s.full();
  auto [again, ok] = wait_for<bool>([&](auto cb) { s.submit_accept(big(100), cb); });
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->full);
  EXPECT_FALSE(again->first) << "one warning per episode, not one per call";

  // What is there still moves: deliveries finish, and retention purges them.
  auto const claimed = claim(s, "w1", t0);
  ASSERT_EQ(claimed.size(), static_cast<std::size_t>(accepted));
  for (auto const& t : claimed)
    ASSERT_TRUE(finish(s, "w1", attempt_log{t.id, 1, t0, 200, "", 1ms}, task_status::succeeded, t0));
  auto [pe, purged] = wait_for<std::uint64_t>([&](auto cb) { s.submit_purge(t0 + 1h, 100, cb); });
  ASSERT_FALSE(pe);
  EXPECT_EQ(purged, static_cast<std::uint64_t>(accepted));
  EXPECT_FALSE(s.full()) << "measured after the purge's commit";
  EXPECT_TRUE(accept(s, big(200)));
}

TEST(Store, R6_PastMaxSizeANewKeyIsRefusedButAKnownOneIsStillAnswered) {
  temp_db db;
  sqlite_store s(db.path(), {}, 1u << 20);
  ASSERT_EQ(claim_key(s, "known", "h", t0).state, key_state::claimed);
  for (int i = 0; i < 64 && !s.full(); ++i) {
    auto t = make_task("fill-" + std::to_string(i));
    t.body = std::string(64 * 1024, 'x');
    accept(s, std::move(t));
  }
  ASSERT_TRUE(s.full());
  auto [e, c] = wait_for<key_claim>([&](auto cb) { s.submit_claim_key("new", "h", t0, t0 + 30s, cb); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->full);
  EXPECT_EQ(claim_key(s, "known", "h", t0).state, key_state::in_flight) << "a held key is still found";
}

// Issue 29, defect 16: a task cancelled while a retry was pending kept that retry's time as
// its end, so it outlived store.retention by up to the retry's wait (4 h on a webhook route).
