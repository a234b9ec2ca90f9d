#include "proxy/observe/json.hpp"

#include <cstdio>
#include <ctime>

namespace rebound::observe {

namespace {

/** The length of the well-formed UTF-8 sequence that starts `s` at `i` (RFC 3629: no overlong
    forms, no surrogates, nothing past U+10FFFF), or 0 when the bytes there are not one. */
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  auto const at = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  auto const cont = [&](std::size_t k) { return i + k < s.size() && (at(k) & 0xc0) == 0x80; };
  auto const c = at(0);
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xe0 && at(1) < 0xa0) return 0;  // overlong
    if (c == 0xed && at(1) > 0x9f) return 0;  // a UTF-16 surrogate
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xf0 && at(1) < 0x90) return 0;  // overlong
    if (c == 0xf4 && at(1) > 0x8f) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto const c = static_cast<unsigned char>(s[i]);
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
        } else if (c < 0x80) {
          out += static_cast<char>(c);
        } else if (auto const n = utf8_sequence(s, i); n > 0) {
          out.append(s.substr(i, n));
          i += n - 1;
        } else {
          // Bytes that are not UTF-8 (obs-text in a field value an upstream sent) would make the
          // whole document invalid JSON: a strict reader (an OTLP collector) refuses all of it.
          out += "\xef\xbf\xbd";  // U+FFFD, the replacement character
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
