#include "proxy/retry/layers.hpp"

#include "proxy/retry/field_value.hpp"

#include <cctype>

namespace rebound::retry {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

/// A count above 1, read without overflow: only the question "more than one?" matters.
bool more_than_one(std::string_view v) {
  v = trim_ows(v);
  if (v.empty()) return false;
  for (char c : v)
    if (c < '0' || c > '9') return false;
  while (v.size() > 1 && v.front() == '0') v.remove_prefix(1);
  return v.size() > 1 || v.front() > '1';
}

}  // namespace

void answer_fields::take(std::string_view name, std::string_view value) {
  // By length first: most fields of a head are none of the five, and no two of them share one.
  auto keep = [&](std::optional<std::string_view>& slot, std::string_view wanted) {
    if (!slot && iequals(name, wanted)) slot = value;
  };
  switch (name.size()) {
    case 11:
      return keep(retry_after, "Retry-After");
    case 13:
      return keep(layers.error, "Rebound-Error");
    case 15:
      return keep(layers.retried, retried_header);
    case 16:
      return keep(layers.attempts, "Rebound-Attempts");
    case 18:
      return keep(layers.overloaded, overloaded_header);
    default:
      return;
  }
}

layer_signal read_layer_signal(const layer_headers& h) {
  layer_signal s;
  if (h.retried && iequals(trim_ows(*h.retried), retried_exhausted)) s.gave_up = true;
  if (h.error && !trim_ows(*h.error).empty() && h.attempts && more_than_one(*h.attempts)) s.gave_up = true;
  if (h.overloaded && trim_ows(*h.overloaded) == "1") s.overloaded = true;
  return s;
}

bool gave_up_after_retrying(stop_reason r, unsigned attempts) {
  switch (r) {
    case stop_reason::layered:
      return true;
    case stop_reason::exhausted:
    case stop_reason::deadline:
    case stop_reason::retry_after_beyond_deadline:
      return attempts > 1;
    default:
      return false;
  }
}

bool answers_overloaded(error_type t) {
  return t == error_type::circuit_open || t == error_type::budget_exhausted || t == error_type::overloaded ||
         t == error_type::concurrency_limited;
}

}  // namespace rebound::retry
