#pragma once
/** JSON as rebound writes it: the one writer of every body it makes (error answers, the admin
    API, /config, alert notices, `rebound check`), straight into a string with no tree in
    between, and the escaper log lines use on their hot path. (What rebound reads as JSON goes
    through Boost.JSON; its writer prints doubles as `1E-1`, which operators should not read.) */
#include <chrono>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

namespace rebound::observe {

/// Appends `s` as a JSON string literal (quotes included) to `out`.
void append_json_string(std::string& out, std::string_view s);

/** Writes JSON into `out`: the commas and the quoting, nothing else. Values go after a key in
    an object or one after another in an array; the caller opens and closes what it nests. */
class json_writer {
 public:
  explicit json_writer(std::string& out) : out_(out) {}

  json_writer& open_object() { return open('{'); }
  json_writer& close_object() { return close('}'); }
  json_writer& open_array() { return open('['); }
  json_writer& close_array() { return close(']'); }
  json_writer& key(std::string_view k);

  json_writer& value(std::string_view s);
  json_writer& value(const char* s) { return value(std::string_view(s)); }
  json_writer& value(const std::string& s) { return value(std::string_view(s)); }
  json_writer& value(bool b) { return literal(b ? "true" : "false"); }
  template <std::integral I>
  requires(!std::same_as<I, bool>) json_writer& value(I n) { return literal(std::to_string(n)); }
  /// A time as RFC 3339 UTC with milliseconds.
  json_writer& value(std::chrono::system_clock::time_point t);
  /// A number with printf's `format` ("%.6g", "%.4f").
  json_writer& number(double d, const char* format = "%.6g");
  json_writer& null() { return literal("null"); }
  /// `json`, already JSON text (a document kept as registered), as the next value.
  json_writer& raw(std::string_view json) { return literal(json); }

  /// key(k), then value(v).
  template <class T>
  json_writer& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

 private:
  json_writer& open(char c);
  json_writer& close(char c);
  json_writer& literal(std::string_view text);
  void separate();

  std::string& out_;
  bool after_value_ = false;  ///< a comma goes before the next key or array element
};

/// RFC 3339 UTC with milliseconds: 2026-11-23T21:07:53.123Z.
std::string iso8601(std::chrono::system_clock::time_point t);

}  // namespace rebound::observe
