// store::new_task, the one way a task is made (hand-over, POST /retry-tasks, R-8's alert).
#include "proxy/store/task.hpp"

#include <gtest/gtest.h>

using namespace rebound::store;

namespace task_test {
namespace {
task_parts parts(std::vector<std::pair<std::string, std::string>> head) {
  return {"payments", "POST", "http://pay.local/charge", std::move(head), "{}", "", "Idempotency-Key", "key-1"};
}
}  // namespace

TEST(NewTask, R8_ATaskIsPendingDueNowWithItsOwnIdAndItsKeyOnItsHead) {
  auto const before = wall_clock::now();
  auto const t = new_task(parts({{"Host", "pay.local"}}));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->id.size(), 36u);
  EXPECT_EQ(t->status, task_status::pending);
  EXPECT_EQ(t->attempts, 0u);
  EXPECT_GE(t->next_attempt_at, before);
  EXPECT_EQ(t->window_start, t->created_at);
  EXPECT_EQ(t->idempotency_key, "key-1");
  ASSERT_EQ(t->headers.size(), 2u);
  EXPECT_EQ(t->headers[1], (std::pair<std::string, std::string>{"Idempotency-Key", "key-1"}));
  EXPECT_NE(new_task(parts({}))->id, t->id);
}

TEST(NewTask, R6_TheAppsOwnKeyFieldIsKeptAsItWasSent) {
  auto const t = new_task(parts({{"Host", "pay.local"}, {"idempotency-key", "\"key-1\""}}));
  ASSERT_TRUE(t);
  ASSERT_EQ(t->headers.size(), 2u) << "no second key field";
  EXPECT_EQ(t->headers[1].second, "\"key-1\"");
}

}  // namespace task_test
