#pragma once
/** `rebound health`: asks a running rebound's admin API whether it serves, for container
    HEALTHCHECKs and exec probes that should not need curl in the image. */
#include <chrono>
#include <string>

namespace rebound::admin {

struct probe_result {
  bool healthy = false;
  std::string detail;  ///< "200 ok", or why not: "connection refused", "503 ...", "timed out"
};

/// GET `path` on `host:port` with HTTP/1.1; healthy when it answers 200 within `timeout`.
/// A wildcard bind address (0.0.0.0, ::) is asked on its loopback address.
probe_result probe_admin(std::string host, unsigned short port, const std::string& path,
                         std::chrono::milliseconds timeout);

}  // namespace rebound::admin
