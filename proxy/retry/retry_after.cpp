#include "proxy/retry/retry_after.hpp"

#include "proxy/retry/field_value.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <ctime>

namespace rebound::retry {
namespace {

constexpr std::array<std::string_view, 12> months{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/// Reads exactly `digits` digits (or 1..digits when `digits` is negative) at `s[pos]`.
bool number(std::string_view s, std::size_t& pos, int digits, int& out) {
  std::size_t const max = static_cast<std::size_t>(digits < 0 ? -digits : digits);
  std::size_t n = 0;
  while (pos + n < s.size() && n < max && std::isdigit(static_cast<unsigned char>(s[pos + n]))) ++n;
  if (n == 0 || (digits > 0 && n != max)) return false;
  std::from_chars(s.data() + pos, s.data() + pos + n, out);
  pos += n;
  return true;
}

bool literal(std::string_view s, std::size_t& pos, std::string_view lit) {
  if (s.substr(pos, lit.size()) != lit) return false;
  pos += lit.size();
  return true;
}

bool month(std::string_view s, std::size_t& pos, int& out) {
  for (int i = 0; i < 12; ++i) {
    if (s.substr(pos, 3) == months[static_cast<std::size_t>(i)]) {
      out = i;
      pos += 3;
      return true;
    }
  }
  return false;
}

bool clock_time(std::string_view s, std::size_t& pos, std::tm& tm) {
  return number(s, pos, 2, tm.tm_hour) && literal(s, pos, ":") && number(s, pos, 2, tm.tm_min) &&
         literal(s, pos, ":") && number(s, pos, 2, tm.tm_sec);
}

/// The three HTTP-date forms of RFC 9110 section 5.6.7.
std::optional<std::time_t> parse_http_date(std::string_view s) {
  std::tm tm{};
  std::size_t comma = s.find(',');
  std::size_t pos = 0;
  if (comma != std::string_view::npos) {
    pos = comma + 1;
    if (!literal(s, pos, " ")) return std::nullopt;
    if (s.find('-') == std::string_view::npos) {
      // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
      if (!(number(s, pos, 2, tm.tm_mday) && literal(s, pos, " ") && month(s, pos, tm.tm_mon) && literal(s, pos, " ") &&
            number(s, pos, 4, tm.tm_year) && literal(s, pos, " ") && clock_time(s, pos, tm) && literal(s, pos, " GMT")))
        return std::nullopt;
      tm.tm_year -= 1900;
    } else {
      // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT (two-digit years: RFC 9110 says read a year
      // more than 50 years ahead as the past century)
      int yy = 0;
      if (!(number(s, pos, 2, tm.tm_mday) && literal(s, pos, "-") && month(s, pos, tm.tm_mon) && literal(s, pos, "-") &&
            number(s, pos, 2, yy) && literal(s, pos, " ") && clock_time(s, pos, tm) && literal(s, pos, " GMT")))
        return std::nullopt;
      tm.tm_year = yy < 70 ? yy + 100 : yy;
    }
  } else {
    // asctime: Sun Nov  6 08:49:37 1994
    pos = 4;
    if (s.size() < 24 || !month(s, pos, tm.tm_mon) || !literal(s, pos, " ")) return std::nullopt;
    if (s[pos] == ' ') ++pos;
    if (!(number(s, pos, -2, tm.tm_mday) && literal(s, pos, " ") && clock_time(s, pos, tm) && literal(s, pos, " ") &&
          number(s, pos, 4, tm.tm_year)))
      return std::nullopt;
    tm.tm_year -= 1900;
  }
  if (pos != s.size() || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
    return std::nullopt;
  return timegm(&tm);
}

/// The longest wait a Retry-After can ask for; anything longer is read as this.
constexpr std::uint64_t ten_years = 10ull * 366 * 24 * 3600;

}  // namespace

std::optional<duration> parse_retry_after(std::string_view value, std::chrono::system_clock::time_point now) {
  value = trim_ows(value);
  if (value.empty()) return std::nullopt;
  if (std::isdigit(static_cast<unsigned char>(value.front()))) {
    std::uint64_t secs = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), secs);
    if (end != value.data() + value.size()) return std::nullopt;
    // Absurd values (or overflow) are a wait far past any deadline, not an error.
    if (ec == std::errc::result_out_of_range || secs > ten_years)
      secs = ten_years;
    else if (ec != std::errc{})
      return std::nullopt;
    return duration(static_cast<duration::rep>(secs * 1000));
  }
  auto const when = parse_http_date(value);
  if (!when) return std::nullopt;
  // Compared in seconds first: a date past 2262 does not fit system_clock's nanoseconds, and
  // is a wait far past any deadline all the same (found by fuzz/fuzz_retry_after).
  auto const now_s = std::chrono::system_clock::to_time_t(now);
  if (*when <= now_s) return duration(0);
  if (static_cast<std::uint64_t>(*when - now_s) > ten_years)
    return duration(static_cast<duration::rep>(ten_years * 1000));
  auto const at = std::chrono::system_clock::from_time_t(*when);
  if (at <= now) return duration(0);
  return std::chrono::duration_cast<duration>(at - now);
}

wait_plan plan_wait(duration backoff, std::optional<duration> retry_after, duration remaining, duration min_attempt) {
  if (retry_after && *retry_after >= remaining) return {false, duration(0), error_type::retry_after_exceeds_deadline};
  auto const wait = std::max(backoff, retry_after.value_or(duration(0)));
  if (remaining - wait < min_attempt) return {false, duration(0), error_type::deadline_exceeded};
  return {true, wait, std::nullopt};
}

}  // namespace rebound::retry

namespace rebound::retry {

std::optional<duration> parse_grpc_pushback(std::string_view value) {
  value = trim_ows(value);
  if (value.empty() || !std::isdigit(static_cast<unsigned char>(value.front()))) return std::nullopt;
  std::uint64_t ms = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
  if (end != value.data() + value.size()) return std::nullopt;
  // As for Retry-After: an absurd wait is one past any deadline, not a reason to retry now.
  if (ec == std::errc::result_out_of_range || ms > ten_years * 1000) ms = ten_years * 1000;
  return duration(static_cast<duration::rep>(ms));
}

}  // namespace rebound::retry
