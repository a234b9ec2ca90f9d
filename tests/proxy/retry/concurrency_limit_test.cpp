#include "proxy/retry/concurrency_limit.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

using namespace rebound;
using namespace std::chrono_literals;
using retry::concurrency_limit;

namespace concurrency_limit_test {
namespace {

using clock = concurrency_limit::clock;
clock::time_point at(std::chrono::milliseconds ms) { return clock::time_point{} + 1000h + ms; }

retry::concurrency_policy adaptive(unsigned min_limit = 2, unsigned max_limit = 200) {
  retry::concurrency_policy p;
  p.mode = retry::concurrency_mode::adaptive;
  p.min_limit = min_limit;
  p.max_limit = max_limit;
  p.probe_interval = 10s;
  return p;
}

/** A dependency with `capacity` servers, each attempt `service` long while it has a server
    to itself: with n in flight it answers in service x max(1, n / capacity) (processor
    sharing), which is how latency climbs past a service's capacity. Clients always have more
    to send than the limit lets through; the simulation steps 1 ms at a time. */
struct simulated_dependency {
  simulated_dependency(unsigned c, std::chrono::milliseconds s) : capacity(c), service(s) {}
  unsigned capacity;
  std::chrono::milliseconds service;
  struct call {
    concurrency_limit::ticket ticket;
    clock::time_point ends;
  };
  std::vector<call> calls;
  std::vector<std::chrono::milliseconds> latencies;  ///< of the calls that ended

  void run(concurrency_limit& l, std::chrono::milliseconds from, std::chrono::milliseconds to) {
    for (auto t = from; t < to; t += 1ms) {
      auto const now = at(t);
      for (auto it = calls.begin(); it != calls.end();) {
        if (it->ends > now) {
          ++it;
          continue;
        }
        latencies.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(now - it->ticket.start));
        l.release(it->ticket, now, true, 0.5);
        it = calls.erase(it);
      }
      while (auto ticket = l.try_acquire(now)) {
        auto const load = std::max(1.0, static_cast<double>(calls.size() + 1) / capacity);
        calls.push_back({*ticket, now + std::chrono::duration_cast<clock::duration>(service * load)});
      }
    }
  }
  std::chrono::milliseconds median_latency_since(std::size_t first) {
    std::vector<std::chrono::milliseconds> v(latencies.begin() + static_cast<std::ptrdiff_t>(first), latencies.end());
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
};

}  // namespace

TEST(ConcurrencyLimit, OffNeverRefuses) {
  concurrency_limit l(retry::concurrency_policy{}, 2, at(0ms));
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(l.try_acquire(at(0ms)));
}

TEST(ConcurrencyLimit, FixedHoldsEachWorkersShareOfTheLimit) {
  retry::concurrency_policy p;
  p.mode = retry::concurrency_mode::fixed;
  p.limit = 9;
  concurrency_limit l(p, 2, at(0ms));  // 9 over 2 workers: 5 each, rounded up
  std::vector<concurrency_limit::ticket> held;
  while (auto t = l.try_acquire(at(0ms))) held.push_back(*t);
  EXPECT_EQ(held.size(), 5u);
  EXPECT_FALSE(l.has_room());
  l.release(held.back(), at(5ms), true, 0.5);
  EXPECT_TRUE(l.has_room());
  EXPECT_TRUE(l.try_acquire(at(5ms)));
  EXPECT_EQ(l.limit(), 5u);  // latency does not move a fixed limit
}

TEST(ConcurrencyLimit, AShareIsNeverBelowOne) {
  retry::concurrency_policy p;
  p.mode = retry::concurrency_mode::fixed;
  p.limit = 1;
  concurrency_limit l(p, 4, at(0ms));
  EXPECT_EQ(l.limit(), 1u);
}

TEST(ConcurrencyLimit, AdaptiveFirstMeasuresTheMinimumRttAtMinLimit) {
  concurrency_limit l(adaptive(2), 1, at(0ms));
  EXPECT_TRUE(l.probing());
  EXPECT_EQ(l.limit(), 2u);
  EXPECT_FALSE(l.min_rtt());
  auto now = 0ms;
  for (unsigned i = 0; i < concurrency_limit::probe_samples; ++i) {
    auto t = l.try_acquire(at(now));
    ASSERT_TRUE(t);
    now += i % 2 ? 10ms : 12ms;
    l.release(*t, at(now), true, 0.5);
  }
  EXPECT_FALSE(l.probing());
  ASSERT_TRUE(l.min_rtt());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(*l.min_rtt()), 12ms);  // the median
}

TEST(ConcurrencyLimit, AttemptsStartedBeforeAProbeDoNotSetTheMinimum) {
  retry::concurrency_policy p = adaptive(1);
  concurrency_limit l(p, 1, at(0ms));
  auto now = 0ms;
  auto measure = [&](std::chrono::milliseconds rtt) {
    while (l.probing()) {
      auto t = l.try_acquire(at(now));
      ASSERT_TRUE(t);
      now += rtt;
      l.release(*t, at(now), true, 0.5);
    }
  };
  measure(10ms);
  // Loaded: many in flight, slow; then the next probe starts while they still are.
  simulated_dependency dep{4, 10ms};
  dep.run(l, now, now + 2s);
  now += 2s;
  std::vector<concurrency_limit::ticket> before;
  while (auto t = l.try_acquire(at(now))) before.push_back(*t);
  now = 13s;  // past probe_interval x 1.15: the next try starts a probe
  EXPECT_FALSE(l.try_acquire(at(now)));  // starts the probe; its limit of 1 is taken
  ASSERT_TRUE(l.probing());
  for (auto& t : before) l.release(t, at(now), true, 0.5);  // 11 s: not what the dependency gives unloaded
  for (auto& c : dep.calls) l.release(c.ticket, at(now), true, 0.5);
  dep.calls.clear();
  EXPECT_TRUE(l.probing());
  measure(20ms);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(*l.min_rtt()), 20ms);
}

TEST(ConcurrencyLimit, SettlesNearTheCapacityWithLatencyUnderTwiceTheUnloaded) {
  concurrency_limit l(adaptive(2, 500), 1, at(0ms));
  simulated_dependency dep{20, 10ms};
  dep.run(l, 0ms, 5s);
  // Without a limit, the clients would hold 500 in flight at 250 ms each.
  EXPECT_GE(l.limit(), 20u);
  EXPECT_LE(l.limit(), 40u);
  auto const first = dep.latencies.size();
  dep.run(l, 5s, 8s);
  EXPECT_LT(dep.median_latency_since(first), 20ms);
}

TEST(ConcurrencyLimit, ADependencyThatSlowsIsHeldLowAndRecoversAfterTheNextProbe) {
  concurrency_limit l(adaptive(2, 500), 1, at(0ms));
  simulated_dependency dep{20, 10ms};
  dep.run(l, 0ms, 3s);
  auto const settled = l.limit();
  dep.service = 80ms;  // a slow dependency at any load: the gradient pulls the limit down
  dep.run(l, 3s, 6s);
  EXPECT_LE(l.limit(), 4u);
  // The next probe (10 s, stretched by the draw) learns the new minimum and lets it grow.
  dep.run(l, 6s, 20s);
  EXPECT_GE(l.limit(), 15u);
  dep.service = 10ms;  // recovered: faster than the minimum, the limit climbs back
  dep.run(l, 20s, 24s);
  EXPECT_GE(l.limit(), settled / 2);
  EXPECT_GE(l.limit(), 20u);
}

TEST(ConcurrencyLimit, TheNextProbeIsStretchedByTheDraw) {
  auto probe_starts = [](double draw) {
    concurrency_limit l(adaptive(1), 1, at(0ms));
    auto now = 0ms;
    while (l.probing()) {
      auto t = l.try_acquire(at(now));
      now += 1ms;
      l.release(*t, at(now), true, draw);
    }
    while (!l.probing()) {
      now += 100ms;
      if (auto t = l.try_acquire(at(now))) l.release(*t, at(now + 1ms), true, draw);
    }
    return now;
  };
  EXPECT_LE(probe_starts(0.0), 10100ms);
  EXPECT_GE(probe_starts(0.99), 11400ms);  // 15% later
}

TEST(ConcurrencyLimit, FailuresWithoutALatencyDoNotMoveIt) {
  concurrency_limit l(adaptive(1), 1, at(0ms));
  for (int i = 0; i < 100; ++i) {
    auto t = l.try_acquire(at(std::chrono::milliseconds(i)));
    ASSERT_TRUE(t);
    l.release(*t, at(std::chrono::milliseconds(i + 1)), false, 0.5);
  }
  EXPECT_TRUE(l.probing());  // refused connections say nothing of the minimum RTT
  EXPECT_EQ(l.in_flight(), 0u);
}

}  // namespace concurrency_limit_test
