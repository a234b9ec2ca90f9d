#pragma once
/** The tracer's settings from the configuration: where spans go (http:// or https://, verified
    against `tracing.ca_file` or the system store), the headers every export carries, the
    sampler and the resource. Start-up work: throws when the CA file does not load. */
#include "config/config.hpp"
#include "proxy/observe/trace.hpp"

namespace rebound::app {

observe::trace_settings trace_settings_for(const config::config& cfg);

}  // namespace rebound::app
