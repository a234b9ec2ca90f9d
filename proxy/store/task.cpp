#include "proxy/store/task.hpp"

#include "proxy/idempotency/key.hpp"
#include "proxy/store/store_support.hpp"

#include <boost/beast/core/string.hpp>

#include <algorithm>

namespace rebound::store {

std::string_view to_string(task_status s) {
  switch (s) {
    case task_status::pending:
      return "PENDING";
    case task_status::in_flight:
      return "IN_FLIGHT";
    case task_status::succeeded:
      return "SUCCEEDED";
    case task_status::exhausted:
      return "EXHAUSTED";
    case task_status::cancelled:
      return "CANCELLED";
    case task_status::dead_lettered:
      return "DEAD_LETTERED";
  }
  return "PENDING";
}

std::optional<task_status> parse_task_status(std::string_view s) {
  for (auto t : {task_status::pending, task_status::in_flight, task_status::succeeded, task_status::exhausted,
                 task_status::cancelled, task_status::dead_lettered})
    if (to_string(t) == s) return t;
  return std::nullopt;
}

namespace support {

std::string encode_headers(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out;
  for (auto const& [name, value] : headers) {
    out += name;
    out += '\0';
    out += value;
    out += '\0';
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> decode_headers(std::string_view in) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!in.empty()) {
    auto const n = in.find('\0');
    if (n == std::string_view::npos) break;
    auto const v = in.find('\0', n + 1);
    if (v == std::string_view::npos) break;
    out.emplace_back(std::string(in.substr(0, n)), std::string(in.substr(n + 1, v - n - 1)));
    in.remove_prefix(v + 1);
  }
  return out;
}

}  // namespace support
std::optional<retry_task> new_task(task_parts parts) {
  auto id = idempotency::new_key();
  if (!id) return std::nullopt;
  retry_task t;
  t.id = std::move(*id);
  t.idempotency_key = std::move(parts.idempotency_key);
  t.dependency = std::move(parts.dependency);
  t.method = std::move(parts.method);
  t.target = std::move(parts.target);
  t.headers = std::move(parts.headers);
  bool const carries_key = std::any_of(t.headers.begin(), t.headers.end(),
                                       [&](const auto& h) { return boost::beast::iequals(h.first, parts.key_header); });
  if (!carries_key) t.headers.emplace_back(std::move(parts.key_header), t.idempotency_key);
  t.body = std::move(parts.body);
  t.policy_id = std::move(parts.policy_id);
  t.created_at = t.next_attempt_at = t.window_start = wall_clock::now();
  return t;
}

}  // namespace rebound::store
