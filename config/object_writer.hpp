#pragma once
/** Internal to config/: an object of the effective config (GET /config), open while in scope,
    written through the one JSON writer (observe/json.hpp) with the config's own vocabulary.
    Not a public header. */
#include "proxy/observe/json.hpp"

#include <cstdint>
#include <string_view>

namespace rebound::config {

class object_writer {
 public:
  explicit object_writer(observe::json_writer& w) : w_(w) { w_.open_object(); }
  ~object_writer() { w_.close_object(); }
  object_writer(const object_writer&) = delete;
  object_writer& operator=(const object_writer&) = delete;

  void string(std::string_view k, std::string_view v) { w_.field(k, v); }
  void number(std::string_view k, double v) { w_.key(k).number(v); }
  void integer(std::string_view k, std::uint64_t v) { w_.field(k, v); }
  void boolean(std::string_view k, bool v) { w_.field(k, v); }
  void strings(std::string_view k, const auto& list) {
    w_.key(k).open_array();
    for (std::string_view s : list) w_.value(s);
    w_.close_array();
  }
  /// The writer, after the key `k`: the caller writes its value.
  observe::json_writer& nested(std::string_view k) { return w_.key(k); }

 private:
  observe::json_writer& w_;
};

}  // namespace rebound::config
