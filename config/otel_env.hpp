#pragma once
/** OpenTelemetry's environment variables for the trace exporter, as every other OpenTelemetry
    component reads them (the OTLP exporter and SDK configuration specifications), for what the
    YAML's `tracing:` and `service:` leave out: the YAML wins where both say something.

    OTEL_SDK_DISABLED=true turns tracing off. OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is the URL
    itself; OTEL_EXPORTER_OTLP_ENDPOINT a base that gets `v1/traces`. The signal-specific
    variable wins over the generic one for endpoint, headers, timeout and certificate. Read at
    start-up and at each reload. */
#include "config/load.hpp"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rebound::config {

/// This process's environment.
std::optional<std::string> process_environment(std::string_view name);

/// What the YAML said itself, so the environment does not override it.
struct yaml_given {
  bool service = false;
  bool endpoint = false;
  bool sample_ratio = false;
  bool timeout = false;
  bool ca_file = false;
};

/** Fills `c.tracing` (and its service name) from `env` where `given` says the YAML did not.
    A malformed variable is an error (file "environment", the variable as its path): start-up
    or the reload is refused, as for a bad key. Settings rebound cannot follow (a protocol
    other than http/json) are warnings. */
void apply_otel_environment(config& c, const yaml_given& given, const environment& env,
                            std::vector<diagnostic>& errors, std::vector<diagnostic>& warnings);

}  // namespace rebound::config
