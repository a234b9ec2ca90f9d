#include "proxy/observe/log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <sstream>
#include <thread>
#include <vector>

using rebound::observe::logger;

namespace log_test {
namespace {

struct pipe_fds {
  int read = -1, write = -1;
  pipe_fds() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    read = fds[0];
    write = fds[1];
  }
  ~pipe_fds() {
    ::close(read);
    ::close(write);
  }
  /// Everything readable now, without blocking.
  std::string drain() const {
    ::fcntl(read, F_SETFL, ::fcntl(read, F_GETFL) | O_NONBLOCK);
    std::string out;
    char buf[65536];
    for (ssize_t n; (n = ::read(read, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    return out;
  }
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

}  // namespace

TEST(Log, LinesFromManyThreadsArriveWholeAndInEachThreadsOrder) {
  pipe_fds p;
  std::string text;
  std::thread reader([&] {
    char buf[65536];
    for (ssize_t n; (n = ::read(p.read, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  });
  {
    logger log("info", p.write);
    std::vector<std::thread> workers;
    for (int t = 0; t < 4; ++t)
      workers.emplace_back([&log, t] {
        for (int i = 0; i < 2000; ++i) log.info("tick", {{"thread", t}, {"i", i}});
      });
    for (auto& w : workers) w.join();
    log.flush();
    EXPECT_EQ(log.dropped(), 0u);
  }
  ::close(p.write);
  p.write = -1;
  reader.join();
  auto const lines = lines_of(text);
  ASSERT_EQ(lines.size(), 8000u);
  std::vector<int> next(4, 0);
  for (auto const& l : lines) {
    ASSERT_EQ(l.front(), '{') << l;
    ASSERT_EQ(l.back(), '}') << l;
    auto const t = l[l.find("\"thread\":") + 9] - '0';
    auto const i = std::stoi(l.substr(l.find("\"i\":") + 4));
    EXPECT_EQ(i, next[t]++) << "thread " << t << " out of order";
  }
}

TEST(Log, FlushWritesEverythingLoggedSoFar) {
  pipe_fds p;
  logger log("info", p.write);
  log.info("first", {{"k", "v"}});
  log.warn("second");
  log.flush();
  auto const lines = lines_of(p.drain());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(R"("level":"info","event":"first","k":"v")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(R"("event":"second")"), std::string::npos) << lines[1];
}

// Every line about a request names it the same way, first (Pingora's request_summary): a
// search for one request's lines needs no per-event knowledge. A method or path the door does
// not have (a CONNECT tunnel's path) is left out, not written empty.
TEST(Log, R10_ARequestSummaryComesFirstInEveryLineAboutARequest) {
  pipe_fds p;
  logger log("info", p.write);
  log.warn("retry_exhausted", {"req-1", "payments", "POST", "/charge"}, {{"attempts", 3}});
  log.info("tunnel_closed", {"req-2", "db", {}, {}}, {{"protocol", "connect"}});
  log.flush();
  auto const lines = lines_of(p.drain());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(R"("event":"retry_exhausted","correlation_id":"req-1","dependency":"payments",)"
                          R"("method":"POST","path":"/charge","attempts":3})"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find(R"("event":"tunnel_closed","correlation_id":"req-2","dependency":"db","protocol":"connect"})"),
            std::string::npos)
      << lines[1];
}

TEST(Log, BelowTheLevelNothingIsWritten) {
  pipe_fds p;
  logger log("warn", p.write);
  log.info("quiet");
  log.error("loud");
  log.flush();
  auto const lines = lines_of(p.drain());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("\"loud\""), std::string::npos);
}

// A stdout nobody reads (a stuck log collector) must not stall a worker: once 8 MiB wait,
// new lines are dropped and counted, and every log call still returns at once.
TEST(Log, StuckStdoutDropsNewLinesInsteadOfBlockingTheCaller) {
  pipe_fds p;
  std::string const padding(1000, 'x');
  std::size_t dropped = 0;
  std::string text;
  {
    logger log("info", p.write);
    for (int i = 0; i < 20000; ++i) log.info("big", {{"pad", padding}, {"i", i}});  // ~20 MB
    dropped = log.dropped();
    // Unblock the writing thread so the logger can finish: read until it is done.
    std::thread reader([&] {
      char buf[65536];
      for (ssize_t n; (n = ::read(p.read, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    });
    log.flush();
    ::close(p.write);  // the logger keeps no copy: the reader sees EOF once the pipe drains
    p.write = -1;
    reader.join();
  }
  // Held at most: the pipe (64 KiB), the batch blocked in write(2) and 8 MiB waiting behind it.
  EXPECT_GT(dropped, 0u);
  EXPECT_LE(text.size(), (16u << 20) + (64u << 10));
  auto const lines = lines_of(text);
  EXPECT_EQ(lines.size() + dropped, 20000u);
  // What was kept is the oldest lines, whole and in order.
  for (std::size_t i = 0; i < lines.size(); ++i)
    ASSERT_NE(lines[i].find("\"i\":" + std::to_string(i) + "}"), std::string::npos) << i;
}

}  // namespace log_test
