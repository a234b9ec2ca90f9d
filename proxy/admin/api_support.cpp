#include "proxy/admin/api_support.hpp"

#include "proxy/wire/error_response.hpp"
#include "proxy/observe/json.hpp"

#include <charconv>
#include <cstdio>
#include <ctime>

namespace rebound::admin::api {

using observe::iso8601;

response answers::json(bhttp::status s, std::string body) const {
  response res{s, req_.version()};
  res.set(bhttp::field::content_type, "application/json");
  res.set(bhttp::field::cache_control, "no-store");
  res.body() = std::move(body);
  res.keep_alive(req_.keep_alive());
  res.prepare_payload();
  return res;
}

response answers::error(bhttp::status s, std::string_view type, std::string_view message) const {
  return json(s, http::error_json(type, message));
}

response answers::unavailable(const store::store_error& e) const {
  if (e.full) {
    auto res = error(bhttp::status::insufficient_storage, "store_full", e.message);
    res.set(bhttp::field::retry_after, std::to_string(store::full_retry_after_s));
    return res;
  }
  return error(bhttp::status::service_unavailable, "store_unavailable", e.message);
}

std::string query_value(std::string_view target, std::string_view name) {
  auto const q = target.find('?');
  if (q == std::string_view::npos) return {};
  auto rest = target.substr(q + 1);
  while (!rest.empty()) {
    auto const amp = rest.find('&');
    auto const pair = rest.substr(0, amp);
    if (auto const eq = pair.find('='); eq != std::string_view::npos && pair.substr(0, eq) == name)
      return std::string(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return {};
}

void task_fields(observe::json_writer& w, const store::retry_task& t) {
  auto const scheme_end = t.target.find("://");
  auto const path_start = scheme_end == std::string::npos ? 0 : t.target.find('/', scheme_end + 3);
  auto const path = path_start == std::string::npos ? std::string("/") : t.target.substr(path_start);
  w.field("id", t.id).field("status", store::to_string(t.status)).field("dependency", t.dependency);
  w.field("method", t.method).field("path", path.substr(0, path.find('?')));
  w.field("idempotency_key", t.idempotency_key).field("attempts", t.attempts).field("created_at", t.created_at);
  if (t.status == store::task_status::pending || t.status == store::task_status::in_flight)
    w.field("next_attempt_at", t.next_attempt_at);
}

std::optional<store::wall_clock::time_point> parse_time(std::string_view s) {
  int y, mo, d, h, mi;
  double sec;
  char z = 0;
  std::string const text(s);
  int used = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%lf%c%n", &y, &mo, &d, &h, &mi, &sec, &z, &used) != 7 ||
      (z != 'Z' && z != 'z') || static_cast<std::size_t>(used) != text.size() || mo < 1 || mo > 12 || d < 1 || d > 31 ||
      h > 23 || mi > 59 || sec < 0 || sec >= 61)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  auto const whole = static_cast<int>(sec);
  tm.tm_sec = whole;
  auto const t = ::timegm(&tm);
  return store::wall_clock::from_time_t(t) +
         std::chrono::duration_cast<store::wall_clock::duration>(std::chrono::duration<double>(sec - whole));
}

std::optional<std::size_t> page_limit(std::string_view text, std::size_t fallback) {
  if (text.empty()) return fallback;
  std::size_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v == 0 || v > max_page) return std::nullopt;
  return v;
}

}  // namespace rebound::admin::api
