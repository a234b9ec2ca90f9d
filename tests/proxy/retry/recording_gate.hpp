#pragma once
// What the retry tests hand the loop in place of a dependency's guard and a real log: a gate
// that records what it was asked and told (R-7's budget and breaker), and a logger whose
// lines the test reads back.
#include "proxy/observe/log.hpp"
#include "config/config.hpp"
#include "proxy/retry/loop_hooks.hpp"

#include <spdlog/sinks/ostream_sink.h>

#include <memory>
#include <sstream>

namespace retry_test {

using namespace rebound;
using namespace rebound::retry;

struct recording_gate final : dependency_gate {
  bool grant = true;      ///< false: every retry is refused as budget_exhausted
  unsigned asked = 0;     ///< allow_retry calls: retries the budget was charged for
  unsigned recorded = 0;  ///< outcomes the breaker was told of
  unsigned failures = 0;  ///< of those, the failures it counts
  retry_permit allow_retry() override {
    ++asked;
    if (grant) return {};
    return {false, error_type::budget_exhausted, "retry budget exhausted (R-7)"};
  }
  void record(bool failed) override {
    ++recorded;
    failures += failed;
  }
};

/// A fixed concurrency limit of `n` (issue 51), for the tests that fill a lane.
inline retry::concurrency_policy fixed_concurrency(unsigned n) {
  retry::concurrency_policy p;
  p.mode = retry::concurrency_mode::fixed;
  p.limit = n;
  return p;
}

struct log_capture {
  std::ostringstream log_text;
  observe::logger log{
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_st>(log_text))};
};

}  // namespace retry_test
