#include "proxy/retry/address_health.hpp"

#include <algorithm>
#include <cmath>

namespace rebound::retry {

namespace {

/// The address has been healthy for as long as the longest ejection: its past is forgiven,
/// and its next ejection is a first one again.
bool forgiven(const retry::outlier_policy& p, address_health::clock::time_point until,
              address_health::clock::time_point now, unsigned times) {
  return times > 0 && now >= until + p.max_ejection;
}

}  // namespace

bool fails_address(const attempt_outcome& answer) {
  if (answer.grpc_status) {
    switch (*answer.grpc_status) {
      case 2: case 4: case 12: case 13: case 14: case 15:
        return true;
      default:
        break;
    }
  }
  return answer.status && *answer.status >= 500;
}

std::size_t address_health::ejected_now(clock::time_point now) const {
  return static_cast<std::size_t>(
      std::count_if(entries_.begin(), entries_.end(), [&](auto const& kv) { return is_ejected(kv.second, now); }));
}

std::optional<address_health::ejection> address_health::failed(const net::ip::address& a, std::size_t name_addresses,
                                                               clock::time_point now) {
  if (!policy_.enabled) return std::nullopt;
  auto it = entries_.find(a);
  if (it == entries_.end()) {
    if (entries_.size() >= max_tracked) return std::nullopt;
    it = entries_.emplace(a, entry{}).first;
  }
  auto& e = it->second;
  // What went out before the ejection and fails now tells nothing new.
  if (is_ejected(e, now)) return std::nullopt;
  if (forgiven(policy_, e.until, now, e.times)) e.times = 0;
  if (++e.failures < policy_.consecutive_failures) return std::nullopt;
  // The share, rounded down: of two addresses one may go, of one none.
  auto const allowed = static_cast<std::size_t>(std::floor(policy_.max_ejected_share * double(name_addresses)));
  if (ejected_now(now) >= allowed) return std::nullopt;
  ++e.times;
  auto const grown = policy_.base_ejection * e.times;
  auto const ejected_for = std::chrono::duration_cast<clock::duration>(std::min(grown, policy_.max_ejection));
  e.until = now + ejected_for;
  e.failures = 0;  // back from it, the address starts a new run
  return ejection{a, e.times, ejected_for};
}

void address_health::answered(const net::ip::address& a, clock::time_point now) {
  auto it = entries_.find(a);
  if (it == entries_.end()) return;
  auto& e = it->second;
  e.failures = 0;
  if (forgiven(policy_, e.until, now, e.times)) e.times = 0;
  if (e.times == 0) entries_.erase(it);
}

void address_health::ejected(clock::time_point now, std::vector<net::ip::address>& out) const {
  for (auto const& [a, e] : entries_)
    if (is_ejected(e, now)) out.push_back(a);
}

std::vector<address_health::reading> address_health::read(clock::time_point now) const {
  std::vector<reading> out;
  for (auto const& [a, e] : entries_)
    if (is_ejected(e, now)) out.push_back({a, e.times, e.until - now});
  std::sort(out.begin(), out.end(), [](auto const& x, auto const& y) { return x.address < y.address; });
  return out;
}

}  // namespace rebound::retry
