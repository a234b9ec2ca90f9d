#pragma once
/** Passive outlier ejection per address (issue 50; Envoy's consecutive_5xx outlier detection).

    A retry helps when it lands somewhere healthier: previous_hosts (upstream/attempt.hpp) steers one
    request's retry away from the address it just tried; this steers every request away from
    an address that keeps failing. The rule is pure: time comes in as an argument and nothing
    here locks, logs or counts; the dependency's guard (dependency_guard.hpp) wraps it, beside
    the breaker it does not replace. */
#include "proxy/retry/policy.hpp"
#include "proxy/net.hpp"
#include "proxy/retry/classify.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <unordered_map>
#include <vector>

namespace rebound::retry {

/** What an exchange tells about the address it went to, and what it asks before it picks one.
    upstream/ calls it; the dependency's guard implements it. */
class address_observer {
 public:
  virtual ~address_observer() = default;
  /// A connect to `a` failed, or it reset or timed out before answering, or answered 5xx.
  /// `name_addresses`: how many addresses the name had in its last answer.
  virtual void address_failed(const net::ip::address& a, std::size_t name_addresses) = 0;
  /// `a` answered with something other than a 5xx.
  virtual void address_answered(const net::ip::address& a) = 0;
  /// Appends the addresses ejected now to `out`; nothing (and no lock) when none is.
  virtual void ejected_addresses(std::vector<net::ip::address>& out) = 0;
};

/** Whether an answer counts against the address it came from: a 5xx, or for gRPC a status
    that maps to one (UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE,
    DATA_LOSS, as Envoy maps them). Any other answer ends the address's run of failures. */
bool fails_address(const attempt_outcome& answer);

class address_health {
 public:
  using clock = std::chrono::steady_clock;
  /// Addresses with failures on record, per dependency: a name's answer is small, and a
  /// dependency whose names churn through more forgets the newest troubles rather than grow.
  static constexpr std::size_t max_tracked = 256;

  explicit address_health(const retry::outlier_policy& p) : policy_(p) {}

  /// An address ejected by the failure just recorded.
  struct ejection {
    net::ip::address address;
    unsigned times = 0;            ///< this one included
    clock::duration ejected_for{};
  };
  /** A failure of `a`. Ejects it at the policy's count of consecutive failures, unless
      ejecting it would put more than the allowed share of the name's `name_addresses` out at
      once (it is then ejected by a later failure, once room is made). */
  std::optional<ejection> failed(const net::ip::address& a, std::size_t name_addresses, clock::time_point now);
  /// A good answer from `a`: its run of failures ends.
  void answered(const net::ip::address& a, clock::time_point now);
  /// Appends the addresses ejected at `now` to `out`.
  void ejected(clock::time_point now, std::vector<net::ip::address>& out) const;
  /// How many addresses have a record (failures, or an ejection not yet forgiven); 0: nothing
  /// to look up, which callers check without a lock.
  std::size_t tracked() const { return entries_.size(); }

  /// For GET /dependencies: the addresses ejected now.
  struct reading {
    net::ip::address address;
    unsigned times = 0;
    clock::duration remaining{};
  };
  std::vector<reading> read(clock::time_point now) const;

 private:
  struct entry {
    unsigned failures = 0;  ///< in a row, since the last good answer or the last ejection
    unsigned times = 0;     ///< ejections so far; forgiven after max_ejection of good health
    clock::time_point until{};  ///< ejected until then
  };
  bool is_ejected(const entry& e, clock::time_point now) const { return e.times > 0 && now < e.until; }
  std::size_t ejected_now(clock::time_point now) const;

  retry::outlier_policy policy_;
  std::unordered_map<net::ip::address, entry> entries_;
};

}  // namespace rebound::retry
