// The configuration loader: any text either loads or is refused with config_error, whose
// diagnostics name a position and a key. Any other exception escaping is a defect (main
// would report it as an unexplained start-up failure, and a reload as an internal error).
#include "config/load.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view const yaml(reinterpret_cast<const char*>(data), size);
  try {
    std::vector<rebound::config::diagnostic> warnings;
    auto const cfg = rebound::config::load_config_text(yaml, "fuzz.yaml", &warnings);
    for (auto const& w : warnings) (void)rebound::config::to_string(w);
  } catch (const rebound::config::config_error& e) {
    for (auto const& d : e.diagnostics()) (void)rebound::config::to_string(d);
  }
  return 0;
}
