#include "proxy/upstream/address_cache.hpp"

#include <algorithm>

namespace rebound::upstream {

std::vector<net::ip::address> interleave_families(const std::vector<net::ip::address>& in) {
  std::vector<net::ip::address> v6, v4, out;
  for (auto const& a : in) (a.is_v6() ? v6 : v4).push_back(a);
  out.reserve(in.size());
  for (std::size_t i = 0; i < std::max(v6.size(), v4.size()); ++i) {
    if (i < v6.size()) out.push_back(v6[i]);
    if (i < v4.size()) out.push_back(v4[i]);
  }
  return out;
}

address_cache::clock::time_point address_cache::usable_until(const entry& e) const {
  return e.addresses.empty() ? e.expires : e.expires + settings_.stale_for;
}

address_cache::found address_cache::find(const std::string& name, clock::time_point now) const {
  auto const it = entries_.find(name);
  if (it == entries_.end()) return {};
  auto const& e = it->second;
  if (e.addresses.empty()) return now < e.expires ? found{state::absent, nullptr, e.why} : found{};
  if (now < e.expires) return {now < e.refresh_at ? state::fresh : state::refresh, &e.addresses, {}};
  if (now >= usable_until(e)) return {};
  if (e.bridging && now < e.ask_after) return {state::bridged, &e.addresses, {}};
  return {state::expired, &e.addresses, {}};
}

const std::vector<net::ip::address>* address_cache::last_answer(const std::string& name) const {
  auto const it = entries_.find(name);
  return it == entries_.end() || it->second.addresses.empty() ? nullptr : &it->second.addresses;
}

void address_cache::answered(const std::string& name, std::vector<net::ip::address> addresses,
                             std::chrono::seconds ttl, clock::time_point now) {
  if (addresses.empty()) return absent(name, "no addresses", now);
  auto const held = std::clamp<config::duration>(ttl, settings_.min_ttl, settings_.max_ttl);
  if (!entries_.contains(name)) make_room(now);
  auto& e = entries_[name];
  e.addresses = interleave_families(addresses);
  e.why.clear();
  e.expires = now + held;
  e.refresh_at = e.expires - held / 10;
  e.bridging = false;
}

void address_cache::absent(const std::string& name, std::string why, clock::time_point now) {
  if (!entries_.contains(name)) make_room(now);
  auto& e = entries_[name];
  e.addresses.clear();
  e.why = std::move(why);
  e.expires = now + settings_.min_ttl;
  e.bridging = false;
}

address_cache::bridge address_cache::failed(const std::string& name, clock::time_point now) {
  auto const it = entries_.find(name);
  if (it == entries_.end() || it->second.addresses.empty() || now >= usable_until(it->second)) return {};
  auto& e = it->second;
  bool const first = !e.bridging;
  e.bridging = true;
  e.ask_after = now + settings_.min_ttl;
  return {&e.addresses, first};
}

void address_cache::make_room(clock::time_point now) {
  if (entries_.size() < max_names) return;
  std::erase_if(entries_, [&](auto const& kv) { return now >= usable_until(kv.second); });
  if (entries_.size() < max_names) return;
  auto const soonest = std::min_element(entries_.begin(), entries_.end(), [](auto const& a, auto const& b) {
    return a.second.expires < b.second.expires;
  });
  entries_.erase(soonest);
}

}  // namespace rebound::upstream
