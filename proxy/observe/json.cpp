#include "proxy/observe/json.hpp"

#include <cstdio>
#include <ctime>

namespace rebound::observe {

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    auto const c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xf];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void json_writer::separate() {
  if (after_value_) out_ += ',';
  after_value_ = false;
}

json_writer& json_writer::open(char c) {
  separate();
  out_ += c;
  return *this;
}

json_writer& json_writer::close(char c) {
  out_ += c;
  after_value_ = true;
  return *this;
}

json_writer& json_writer::key(std::string_view k) {
  separate();
  append_json_string(out_, k);
  out_ += ':';
  return *this;
}

json_writer& json_writer::literal(std::string_view text) {
  separate();
  out_ += text;
  after_value_ = true;
  return *this;
}

json_writer& json_writer::value(std::string_view s) {
  separate();
  append_json_string(out_, s);
  after_value_ = true;
  return *this;
}

json_writer& json_writer::value(std::chrono::system_clock::time_point t) { return value(iso8601(t)); }

json_writer& json_writer::number(double d, const char* format) {
  char buf[64];
  auto const n = std::snprintf(buf, sizeof buf, format, d);
  return literal(std::string_view(buf, n > 0 ? static_cast<std::size_t>(n) : 0));
}

std::string iso8601(std::chrono::system_clock::time_point t) {
  auto const ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t const secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

}  // namespace rebound::observe
