#include "proxy/wire/hop_by_hop.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

namespace rebound::http {

namespace bhttp = boost::beast::http;

namespace {

/// The fields that describe one connection whatever Connection names.
bool always_hop_by_hop(bhttp::field name) {
  switch (name) {
    case bhttp::field::connection:
    case bhttp::field::proxy_connection:
    case bhttp::field::keep_alive:
    case bhttp::field::te:
    case bhttp::field::trailer:
    case bhttp::field::transfer_encoding:
    case bhttp::field::upgrade:
    case bhttp::field::proxy_authorization:
    case bhttp::field::proxy_authenticate:
      return true;
    default:
      return false;
  }
}

/// The names Connection's tokens add to the list; most messages have none (keep-alive is on it already).
class connection_names {
 public:
  void add(std::string_view name) {
    if (count_ < few_.size())
      few_[count_++] = name;
    else
      more_.push_back(name);
  }
  bool empty() const { return count_ == 0; }
  bool has(std::string_view name) const {
    auto const same = [name](std::string_view n) { return boost::beast::iequals(n, name); };
    return std::any_of(few_.begin(), few_.begin() + static_cast<std::ptrdiff_t>(count_), same) ||
           std::any_of(more_.begin(), more_.end(), same);
  }

 private:
  std::array<std::string_view, 8> few_{};
  std::size_t count_ = 0;
  std::vector<std::string_view> more_;  ///< a ninth name on: rare enough to allocate
};

/// One rule for both field stores: a head rebound builds or parses (basic_fields) and an
/// upstream's response (field_list).
template <class Fields>
void strip_fields(Fields& f) {
  // One walk of the fields, erasing by position: a lookup by name per listed field cost a
  // tree search with case-insensitive compares each, twice per proxied request. The names
  // view Connection's values, so Connection itself goes last.
  connection_names named;
  bool has_connection = false;
  for (auto const& h : f) {
    if (h.name() != bhttp::field::connection) continue;
    has_connection = true;
    for (auto token : bhttp::token_list{h.value()}) {
      std::string_view const name(token.data(), token.size());
      if (!always_hop_by_hop(bhttp::string_to_field(name))) named.add(name);
    }
  }
  for (auto it = f.begin(); it != f.end();) {
    auto const name = it->name();
    bool const drop = name != bhttp::field::connection &&
                      (always_hop_by_hop(name) || (!named.empty() && named.has(it->name_string())));
    it = drop ? f.erase(it) : std::next(it);
  }
  if (has_connection) f.erase(bhttp::field::connection);
}

template <class Fields>
void add_via_to(Fields& f, unsigned received_version, std::string_view token) {
  // Several Via lines are one list: folded into one in their order, then this hop's entry
  // (RFC 9110 section 7.6.3: the protocol version this hop received the message in). Built on
  // the stack while it fits, as it does unless the client sent long Via lines: this runs for
  // both heads of every proxied request, and two strings here were two mallocs each time.
  std::array<char, 256> stack;
  std::size_t used = 0;
  std::string spilled;  // the whole value, once it did not fit
  auto put = [&](std::string_view s) {
    if (spilled.empty() && used + s.size() <= stack.size()) {
      std::memcpy(stack.data() + used, s.data(), s.size());
      used += s.size();
      return;
    }
    if (spilled.empty()) spilled.assign(stack.data(), used);
    spilled += s;
  };
  bool folded = false;
  for (auto const& h : f) {
    if (h.name() != bhttp::field::via) continue;
    if (folded) put(", ");
    put(h.value());
    folded = true;
  }
  if (folded) put(", ");
  put(received_version >= 11 ? "1.1 rebound" : "1.0 rebound");
  if (!token.empty()) {
    put(" (");
    put(token);
    put(")");
  }
  f.set(bhttp::field::via, spilled.empty() ? std::string_view(stack.data(), used) : std::string_view(spilled));
}

}  // namespace

void strip_hop_by_hop(head_fields& f) { strip_fields(f); }
void strip_hop_by_hop(field_list& f) { strip_fields(f); }
void add_via(head_fields& f, unsigned received_version, std::string_view token) {
  add_via_to(f, received_version, token);
}
void add_via(field_list& f, unsigned received_version, std::string_view token) {
  add_via_to(f, received_version, token);
}

bool forwardable_trailer(bhttp::field name, std::string_view name_string) {
  if (always_hop_by_hop(name)) return false;
  switch (name) {
    // framing, routing, authentication, request modifiers and response control data
    case bhttp::field::content_length:
    case bhttp::field::host:
    case bhttp::field::authorization:
    case bhttp::field::www_authenticate:
    case bhttp::field::cookie:
    case bhttp::field::set_cookie:
    case bhttp::field::content_type:
    case bhttp::field::content_encoding:
    case bhttp::field::content_range:
    case bhttp::field::cache_control:
    case bhttp::field::expect:
    case bhttp::field::max_forwards:
    case bhttp::field::pragma:
    case bhttp::field::range:
    case bhttp::field::age:
    case bhttp::field::expires:
    case bhttp::field::date:
    case bhttp::field::location:
    case bhttp::field::retry_after:
    case bhttp::field::vary:
    case bhttp::field::via:
      return false;
    default:
      break;
  }
  return !boost::beast::iequals(name_string.substr(0, 3), "if-");
}

}  // namespace rebound::http
