// The only integration file compiled with absolute paths (CMakeLists.txt sets them on this
// file alone), so that the others hash the same in every clone.
#include "rebound_process.hpp"

namespace itest {

const std::string& rebound_binary() {
  static const std::string path = REBOUND_BINARY;
  return path;
}

std::string source_path(const std::string& relative) { return std::string(REBOUND_SOURCE_DIR) + "/" + relative; }

}  // namespace itest
