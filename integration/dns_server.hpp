// A small DNS server for one test (issue 50): UDP on 127.0.0.1, A and AAAA records with TTLs,
// NXDOMAIN for names it does not know, SERVFAIL or silence on demand. Real packets, so the
// resolver under test (c-ares inside rebound) is exercised as a real server would exercise it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace itest {

class DnsServer {
 public:
  struct Answer {
    std::vector<std::string> addresses;  ///< IPv4 and IPv6 literals; A and AAAA are answered from them
    std::uint32_t ttl = 60;
    int rcode = 0;        ///< 2: SERVFAIL, 3: NXDOMAIN, 5: REFUSED
    bool silent = false;  ///< the query is dropped: a stalled server
  };

  /// Listening; throws std::runtime_error when it cannot bind.
  DnsServer();
  ~DnsServer();
  DnsServer(const DnsServer&) = delete;
  DnsServer& operator=(const DnsServer&) = delete;

  std::uint16_t port() const { return port_; }
  /// As `dns.servers` takes it.
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  void set(const std::string& name, Answer a);
  /// Every query is dropped while set (a stalled server), for every name.
  void stall(bool on) { stalled_ = on; }
  /// Queries received for `name` (A and AAAA each count), answered or not.
  std::size_t queries(const std::string& name) const;

 private:
  void serve();
  std::string answer(const std::string& query);

  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false}, stalled_{false};
  mutable std::mutex mutex_;
  std::map<std::string, Answer> answers_;
  std::map<std::string, std::size_t> queries_;
  std::thread thread_;
};

}  // namespace itest
