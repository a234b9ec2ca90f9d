#pragma once
// Store calls made synchronous for tests of either store: the test thread is not an Asio
// executor, so it waits on each callback.
#include "proxy/store/task_store.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace store_calls {

using namespace rebound::store;
using namespace std::chrono_literals;

/// Waits for a store callback: the test thread is not an Asio executor.
template <class T, class Submit>
std::pair<std::optional<store_error>, T> wait_for(Submit submit) {
  std::promise<std::pair<std::optional<store_error>, T>> p;
  auto f = p.get_future();
  submit([&p](std::optional<store_error> e, T v) { p.set_value({std::move(e), std::move(v)}); });
  return f.get();
}

/// A fresh directory for one test's database file, removed afterwards.
struct temp_db {
  std::filesystem::path dir;
  temp_db() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "rebound-store-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
  }
  ~temp_db() { std::filesystem::remove_all(dir); }
  std::string path() const { return (dir / "rebound.db").string(); }
};

inline const wall_clock::time_point t0 = wall_clock::time_point(std::chrono::seconds(1'800'000'000));

inline retry_task make_task(std::string id, wall_clock::time_point due = t0) {
  retry_task t;
  t.id = std::move(id);
  t.idempotency_key = "key-" + t.id;
  t.dependency = "webhooks";
  t.method = "POST";
  t.target = "http://hooks.internal:8080/deliver?x=1";
  t.headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer app-token"}};
  t.body = std::string("{\"event\":\"paid\"}\0tail", 22);  // a body is bytes, NUL included
  t.next_attempt_at = due;
  t.created_at = t0;
  return t;
}

inline bool accept(task_store& s, retry_task t) {
  auto [e, ok] = wait_for<bool>([&](auto cb) { s.submit_accept(std::move(t), cb); });
  return !e && ok;
}

inline std::vector<retry_task> claim(task_store& s, const std::string& owner, wall_clock::time_point now,
                                     std::chrono::seconds lease = 30s) {
  auto [e, tasks] =
      wait_for<std::vector<retry_task>>([&](auto cb) { s.submit_claim(owner, now, now + lease, 100, cb); });
  EXPECT_FALSE(e) << e->message;
  return tasks;
}

inline std::optional<retry_task> get(task_store& s, const std::string& id) {
  auto [e, t] = wait_for<std::optional<retry_task>>([&](auto cb) { s.submit_get(id, cb); });
  EXPECT_FALSE(e);
  return t;
}

inline std::uint64_t count(task_store& s, task_status st) {
  auto [e, counts] = wait_for<status_counts>([&](auto cb) { s.submit_counts(cb); });
  EXPECT_FALSE(e);
  return counts[static_cast<std::size_t>(st)];
}

inline task_filter dead_letters(std::string dependency) {
  task_filter f;
  f.dependency = std::move(dependency);
  return f;
}

inline bool finish(task_store& s, const std::string& owner, attempt_log a, task_status next,
                   wall_clock::time_point at) {
  auto [e, ok] = wait_for<bool>([&](auto cb) { s.submit_finish_attempt(owner, std::move(a), next, at, cb); });
  EXPECT_FALSE(e);
  return ok;
}

inline key_claim claim_key(task_store& s, const std::string& key, const std::string& hash, wall_clock::time_point now) {
  auto [e, c] = wait_for<key_claim>([&](auto cb) { s.submit_claim_key(key, hash, now, now + 30s, cb); });
  EXPECT_FALSE(e);
  return c;
}

}  // namespace store_calls
