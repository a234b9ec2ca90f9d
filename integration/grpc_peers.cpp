#include "grpc_peers.hpp"

#include "client.hpp"

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace itest {
namespace {

using namespace std::chrono_literals;

// Debian's interpreter, where python3-grpcio and python3-h2 are installed (a python3 earlier
// on PATH, a pyenv one say, has neither).
const std::string python = "/usr/bin/python3";
const std::string grpc_script = source_path("integration/grpc_peer.py");
const std::string h2_script = source_path("integration/h2_peer.py");

}  // namespace

PortFilePeer::PortFilePeer(std::vector<std::string> argv, const std::vector<std::string>& after_port_file)
    : dir_(make_temp_dir()), proc_(with_port_file(std::move(argv), after_port_file)) {}

PortFilePeer::~PortFilePeer() { remove_tree(dir_); }

std::vector<std::string> PortFilePeer::with_port_file(std::vector<std::string> argv,
                                                      const std::vector<std::string>& after) {
  argv.push_back(dir_ + "/port");
  argv.insert(argv.end(), after.begin(), after.end());
  return argv;
}

std::uint16_t PortFilePeer::port() {
  if (port_ == 0) {
    auto const file = dir_ + "/port";
    for (int i = 0; i < 500 && !std::filesystem::exists(file); ++i) std::this_thread::sleep_for(20ms);
    if (!std::filesystem::exists(file)) throw std::runtime_error("peer did not start: " + proc_.stderr_text());
    port_ = static_cast<std::uint16_t>(std::stoi(read_file(file)));
  }
  return port_;
}

GrpcServer::GrpcServer() : PortFilePeer({python, grpc_script, "server"}, {}) {}

GrpcServer::GrpcServer(const std::string& bind, bool unavailable)
    : PortFilePeer({python, grpc_script, "server-at"},
                   unavailable ? std::vector<std::string>{bind, "unavailable"} : std::vector<std::string>{bind}) {}

TlsGrpcServer::TlsGrpcServer(const IssuedCert& cert)
    : PortFilePeer({python, grpc_script, "server-tls"}, {cert.cert_file, cert.key_file}) {}

H2Peer::H2Peer() : PortFilePeer({python, h2_script}, {}) {}

CallResult grpc_call(std::uint16_t rebound_port, const std::string& authority, const std::string& method,
                     const std::vector<std::string>& args) {
  std::vector<std::string> argv{python,      grpc_script,  "call", "127.0.0.1:" + std::to_string(rebound_port),
                                method,      "--meta",     "x-authority=" + authority};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_process(argv, {}, 30s);
  CallResult out;
  out.raw = r.out + r.err;
  auto j = parse_json(r.out);
  if (!j) return out;
  if (auto const* c = j->get("code")) out.code = static_cast<int>(c->n);
  if (auto const* b = j->get("body")) out.body = b->s;
  if (auto const* d = j->get("details")) out.details = d->s;
  for (auto [name, into] : {std::pair{"trailing", &out.trailing}, std::pair{"initial", &out.initial}})
    if (auto const* t = j->get(name))
      for (auto const& [k, v] : t->o) (*into)[k] = v.s;
  return out;
}

}  // namespace itest
