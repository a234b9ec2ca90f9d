#pragma once
/** Minimal JSON text building for log lines and error bodies: rebound writes JSON, never
    reads it, so an escaper is all it needs. */
#include <string>
#include <string_view>

namespace rebound::observe {

/// Appends `s` as a JSON string literal (quotes included) to `out`.
void append_json_string(std::string& out, std::string_view s);

}  // namespace rebound::observe
