#pragma once
/** A hash for maps keyed by std::string that are searched with a string_view (C++20's
    heterogeneous lookup, with std::equal_to<>): lookups on the request path build no string.
    Used by the guard cache (dependency_guard.hpp) and the config's host index. */
#include <cstddef>
#include <functional>
#include <string_view>

namespace rebound::retry {

struct name_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace rebound::retry
