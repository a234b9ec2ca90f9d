// The only integration file compiled with absolute paths (CMakeLists.txt sets them on this
// file alone), so that the others hash the same in every clone.
#include "rebound_process.hpp"

#include <cstdlib>

namespace itest {

// REBOUND_BIN runs these tests against another build's binary: CI's ThreadSanitizer pass runs
// the integration suites on its TSan rebound without compiling this harness a third time.
const std::string& rebound_binary() {
  static const std::string path = [] {
    char const* other = std::getenv("REBOUND_BIN");
    return std::string(other && *other ? other : REBOUND_BINARY);
  }();
  return path;
}

std::string source_path(const std::string& relative) { return std::string(REBOUND_SOURCE_DIR) + "/" + relative; }

}  // namespace itest
