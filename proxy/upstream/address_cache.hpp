#pragma once
/** What the DNS said of each name, for as long as it holds (issue 50). Pure: the time is an
    argument, so the TTL rules are unit-tested without a server or a sleep.

    A name's answer is kept for its TTL, held between `min_ttl` and `max_ttl` (a TTL of 0 would
    ask the servers on every connection, a TTL of a week would pin a moved service). A name
    that does not exist is kept as such for `min_ttl`. In the last tenth of its TTL, and past
    it, an answer is still used while the servers are asked again in the background, so a
    request never waits for a name it has an answer for (Envoy's DNS cache and HAProxy's
    resolvers refresh the same way); when the servers then fail, the old answer bridges the
    outage for `stale_for` past its TTL, and the servers are asked again at most every
    `min_ttl` meanwhile (HAProxy's `hold obsolete`). */
#include "config/config.hpp"
#include "proxy/net.hpp"

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rebound::upstream {

/// Addresses in the order connections try them: RFC 8305 section 4, IPv6 first, then the
/// families alternating, each family in the order the server gave.
std::vector<net::ip::address> interleave_families(const std::vector<net::ip::address>& in);

class address_cache {
 public:
  using clock = std::chrono::steady_clock;
  /// Names kept at most (per worker): a process that calls many distinct hosts (webhooks)
  /// must not grow without bound. Past it, names whose answers are past all use go first,
  /// then the one that expires soonest.
  static constexpr std::size_t max_names = 4096;

  explicit address_cache(const config::dns_settings& s) : settings_(s) {}
  void set_settings(const config::dns_settings& s) { settings_ = s; }

  enum class state {
    fresh,    ///< within its TTL: use `addresses`
    refresh,  ///< in the last tenth of its TTL: use `addresses`, and ask in the background
    bridged,  ///< past its TTL while the servers fail: use `addresses`, do not ask yet
    expired,  ///< past its TTL: use `addresses` (until stale_for), and ask in the background
    absent,   ///< the name does not exist (or has no address): `why`
    unknown,  ///< never asked, or forgotten
  };
  struct found {
    state s = state::unknown;
    const std::vector<net::ip::address>* addresses = nullptr;
    std::string_view why;
  };
  found find(const std::string& name, clock::time_point now) const;
  /// The last answer's addresses of `name`, however old (none for an absent or unknown name).
  const std::vector<net::ip::address>* last_answer(const std::string& name) const;

  /// The servers answered with addresses, the shortest record TTL `ttl`.
  void answered(const std::string& name, std::vector<net::ip::address> addresses, std::chrono::seconds ttl,
                clock::time_point now);
  /// The name does not exist, or has no A or AAAA record.
  void absent(const std::string& name, std::string why, clock::time_point now);
  /** The servers failed to answer for `name`. With an answer still within `stale_for` of its
      TTL, that answer is used (returned) and asked again no sooner than `min_ttl` from now;
      `first` says this outage of the name begins now (what is logged once). */
  struct bridge {
    const std::vector<net::ip::address>* addresses = nullptr;  ///< null: nothing to bridge with
    bool first = false;
  };
  bridge failed(const std::string& name, clock::time_point now);

  std::size_t size() const { return entries_.size(); }

 private:
  struct entry {
    std::vector<net::ip::address> addresses;  ///< empty: the name is absent
    std::string why;                          ///< why it is absent
    clock::time_point expires;                ///< end of the TTL
    clock::time_point refresh_at;             ///< when its last tenth begins
    clock::time_point ask_after{};            ///< while bridging: when to ask the servers again
    bool bridging = false;
  };
  void make_room(clock::time_point now);
  clock::time_point usable_until(const entry& e) const;

  config::dns_settings settings_;
  std::unordered_map<std::string, entry> entries_;
};

}  // namespace rebound::upstream
