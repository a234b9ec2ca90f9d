#pragma once
/** YAML → `config`: the one place that reads the configuration file.

    Loading is start-up/control-plane work, so it reports problems by throwing
    `config_error`, which carries every problem found (not just the first), each with the
    file position and the dotted key path, as SPEC section 1 prints them. */
#include "config/config.hpp"

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rebound::config {

struct diagnostic {
  std::string file;
  int line = 0;      ///< 1-based; 0 when unknown
  int column = 0;    ///< 1-based
  std::string path;  ///< e.g. `defaults.attempt_timeout`
  std::string message;
  std::string rule;      ///< e.g. `R-1`; empty for schema problems
  bool warning = false;  ///< SPEC 2.1's warning level: reported, the file still loads
};

/// `FILE:LINE:COL: path.to.key: message (rule)`, with `warning: ` before the path for a warning
std::string to_string(const diagnostic& d);

class config_error : public std::runtime_error {
 public:
  /// `malformed`: the file could not be read or is not YAML (check exits 2, not 1).
  /// `diagnostics` holds at least one error, and the file's warnings too.
  explicit config_error(std::vector<diagnostic> diagnostics, bool malformed = false);
  const std::vector<diagnostic>& diagnostics() const noexcept { return diagnostics_; }
  bool malformed() const noexcept { return malformed_; }

 private:
  std::vector<diagnostic> diagnostics_;
  bool malformed_;
};

/// An environment variable's value, nothing when it is not set (config/otel_env.hpp).
using environment = std::function<std::optional<std::string>(std::string_view name)>;

/// Reads and validates FILE. Throws config_error (unreadable, malformed, or invalid). A
/// valid file's warning-level findings go to `warnings` when given. What the file leaves out
/// of `tracing:` may come from OpenTelemetry's variables in `env` (this process's when empty).
config load_config_file(const std::string& path, std::vector<diagnostic>* warnings = nullptr,
                        const environment& env = {});

/** A policy registered through the admin API: `text` (JSON or YAML) holds the keys of a
    policy in the file (SPEC 2) and is read and checked by the same code and the same rules,
    as if it stood under `defaults:`; without `context` it is `async`. Throws config_error. */
policy load_policy_text(std::string_view text, const std::string& name);

/// Same, from text; `name` stands for the file name in diagnostics.
config load_config_text(std::string_view yaml, const std::string& name, std::vector<diagnostic>* warnings = nullptr,
                        const environment& env = {});

}  // namespace rebound::config
