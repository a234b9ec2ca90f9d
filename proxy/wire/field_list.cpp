#include "proxy/wire/field_list.hpp"

#include <boost/beast/core/string.hpp>

#include <algorithm>

namespace rebound::http {

namespace bhttp = boost::beast::http;

namespace {

/// Room for a typical head at once: growing by doubling from nothing took a dozen mallocs
/// for each exchange's first head.
constexpr std::size_t typical_bytes = 512;
constexpr std::size_t typical_fields = 24;

}  // namespace

void field_list::insert(bhttp::field name, std::string_view name_string, std::string_view value) {
  // A value may view this list's own bytes (a field copied to another): growing the string
  // would move them, so their place is taken before it grows.
  auto const inside = [this](std::string_view s) {
    return !s.empty() && s.data() >= bytes_.data() && s.data() < bytes_.data() + bytes_.size();
  };
  auto const name_at = inside(name_string) ? name_string.data() - bytes_.data() : -1;
  auto const value_at = inside(value) ? value.data() - bytes_.data() : -1;
  auto const at = bytes_.size();
  if (entries_.capacity() == 0) entries_.reserve(typical_fields);
  bytes_.reserve(std::max(typical_bytes, at + name_string.size() + value.size()));
  if (name_at >= 0) name_string = std::string_view(bytes_).substr(static_cast<std::size_t>(name_at), name_string.size());
  if (value_at >= 0) value = std::string_view(bytes_).substr(static_cast<std::size_t>(value_at), value.size());
  bytes_.append(name_string);
  bytes_.append(value);
  entries_.push_back({name, static_cast<std::uint32_t>(at), static_cast<std::uint32_t>(name_string.size()),
                      static_cast<std::uint32_t>(value.size()), false});
}

void field_list::set(bhttp::field name, std::string_view value) {
  // The value may be the one being replaced: it is copied before the old one is marked.
  insert(name, bhttp::to_string(name), value);
  auto const added = entries_.size() - 1;
  for (std::size_t i = 0; i < added; ++i)
    if (entries_[i].name == name) entries_[i].erased = true;
}

void field_list::set(std::string_view name, std::string_view value) {
  insert(bhttp::string_to_field(name), name, value);
  auto const added = entries_.size() - 1;
  for (std::size_t i = 0; i < added; ++i)
    if (same_name(entries_[i], name)) entries_[i].erased = true;
}

field_list::const_iterator field_list::erase(const_iterator it) {
  const_cast<entry*>(it.current_.entry_)->erased = true;
  return ++it;
}

std::size_t field_list::erase(bhttp::field name) {
  std::size_t n = 0;
  for (auto& e : entries_)
    if (!e.erased && e.name == name) {
      e.erased = true;
      ++n;
    }
  return n;
}

bool field_list::same_name(const entry& e, std::string_view name) const {
  // Two spellings of one field differ only in case (RFC 9110 section 5.1), so the name is
  // compared as written, without mapping it to Beast's enum first.
  return !e.erased && e.name_size == name.size() &&
         boost::beast::iequals(std::string_view(bytes_.data() + e.at, e.name_size), name);
}

field_list::const_iterator field_list::find(bhttp::field name) const {
  for (auto const& e : entries_)
    if (!e.erased && e.name == name) return at(e);
  return end();
}

field_list::const_iterator field_list::find(std::string_view name) const {
  for (auto const& e : entries_)
    if (same_name(e, name)) return at(e);
  return end();
}

std::size_t field_list::count(bhttp::field name) const {
  std::size_t n = 0;
  for (auto const& e : entries_) n += !e.erased && e.name == name;
  return n;
}

std::string_view field_list::operator[](bhttp::field name) const {
  auto const it = find(name);
  return it == end() ? std::string_view() : it->value();
}

}  // namespace rebound::http
