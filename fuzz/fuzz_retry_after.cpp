// Retry-After as an upstream sends it (delta-seconds or one of three date forms), then
// combined with a backoff and the deadline. Any value parses or is ignored; a wait never
// exceeds what the deadline leaves.
#include "proxy/retry/decide.hpp"
#include "proxy/retry/retry_after.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace std::chrono;
  std::string_view const value(reinterpret_cast<const char*>(data), size);
  auto const now = system_clock::time_point{} + seconds{1'700'000'000};
  auto const wait = rebound::retry::parse_retry_after(value, now);
  if (wait && wait->count() < 0) std::abort();
  auto const remaining = milliseconds{30'000};
  auto const plan = rebound::retry::plan_wait(milliseconds{250}, wait, remaining, milliseconds{100});
  if (plan.retry && (plan.wait > remaining || plan.wait.count() < 0)) std::abort();

  // The whole decision after a 503 carrying this value: a retry never waits past the deadline.
  rebound::retry::policy policy;
  rebound::retry::attempt_facts f;
  f.outcome = {503, std::nullopt};
  f.retry_after = value;
  f.now = std::chrono::steady_clock::time_point{} + hours{1000};
  f.deadline = f.now + remaining;
  f.wall_now = now;
  f.u = size > 0 ? data[0] / 256.0 : 0.0;
  auto const d = rebound::retry::decide(policy, f);
  if (auto const* r = std::get_if<rebound::retry::retry_in>(&d); r && (r->wait >= remaining || r->wait.count() < 0))
    std::abort();
  return 0;
}
