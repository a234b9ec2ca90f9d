// Real gRPC and HTTP/2 peers for the gRPC integration tests, as child processes of the test:
// integration/grpc_peer.py (Debian's python3-grpcio: a server, a TLS server, one-call client)
// and integration/h2_peer.py (hyper-h2: an upstream that misbehaves on the HTTP/2 layer).
#pragma once
#include "rebound_process.hpp"
#include "test_pki.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace itest {

/// A peer started as `argv... PORT_FILE [after...]`, which writes its port to PORT_FILE.
class PortFilePeer {
 public:
  PortFilePeer(std::vector<std::string> argv, const std::vector<std::string>& after_port_file);
  ~PortFilePeer();
  PortFilePeer(const PortFilePeer&) = delete;
  PortFilePeer& operator=(const PortFilePeer&) = delete;
  /// Waits (10 s) for the port file; throws with the peer's stderr when it never comes.
  std::uint16_t port();
  std::string stderr_text() const { return proc_.stderr_text(); }

 private:
  std::vector<std::string> with_port_file(std::vector<std::string> argv, const std::vector<std::string>& after);
  std::string dir_;
  ChildProcess proc_;
  std::uint16_t port_ = 0;
};

/// A real grpcio server on 127.0.0.1 (grpc_peer.py server): Echo, Fail, Slow.
class GrpcServer : public PortFilePeer {
 public:
  GrpcServer();
  /// On `bind` (ADDRESS:PORT); `unavailable`: every call fails UNAVAILABLE (a host going down).
  GrpcServer(const std::string& bind, bool unavailable);
};

/// The same over TLS (grpc_peer.py server-tls) with `cert`.
class TlsGrpcServer : public PortFilePeer {
 public:
  explicit TlsGrpcServer(const IssuedCert& cert);
};

/// The scripted HTTP/2 upstream (h2_peer.py): behaviour by :path, a count per path.
class H2Peer : public PortFilePeer {
 public:
  H2Peer();
};

struct CallResult {
  int code = -1;  ///< the gRPC status the client saw; -1: the client printed nothing readable
  std::string body, details;
  std::map<std::string, std::string> trailing, initial;
  std::string raw;  ///< what the client printed, for failure messages
};

/** One unary call from a real grpcio client to rebound on `rebound_port`; `authority` names
    the dependency, `args` are grpc_peer.py call's (--meta k=v, --timeout S, --payload T). */
CallResult grpc_call(std::uint16_t rebound_port, const std::string& authority, const std::string& method,
                     const std::vector<std::string>& args = {});

}  // namespace itest
