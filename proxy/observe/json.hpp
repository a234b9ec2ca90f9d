#pragma once
/** JSON text building for log lines, error bodies and admin answers: an escaper is all
    writing needs. (What rebound reads as JSON, token endpoint answers and JWT payloads, goes
    through Boost.JSON.) */
#include <chrono>
#include <string>
#include <string_view>

namespace rebound::observe {

/// Appends `s` as a JSON string literal (quotes included) to `out`.
void append_json_string(std::string& out, std::string_view s);

/// RFC 3339 UTC with milliseconds: 2026-11-23T21:07:53.123Z.
std::string iso8601(std::chrono::system_clock::time_point t);

}  // namespace rebound::observe
