#pragma once
/** JSON text building for log lines, error bodies and admin answers: an escaper is all
    writing needs. (What rebound reads as JSON, token endpoint answers and JWT payloads, goes
    through Boost.JSON.) */
#include <string>
#include <string_view>

namespace rebound::observe {

/// Appends `s` as a JSON string literal (quotes included) to `out`.
void append_json_string(std::string& out, std::string_view s);

}  // namespace rebound::observe
