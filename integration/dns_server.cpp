#include "dns_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace itest {

namespace {

constexpr std::uint16_t type_a = 1, type_aaaa = 28;

void put16(std::string& out, std::uint16_t v) {
  out += static_cast<char>(v >> 8);
  out += static_cast<char>(v & 0xff);
}

void put32(std::string& out, std::uint32_t v) {
  put16(out, static_cast<std::uint16_t>(v >> 16));
  put16(out, static_cast<std::uint16_t>(v & 0xffff));
}

std::uint16_t get16(const std::string& s, std::size_t at) {
  return static_cast<std::uint16_t>((static_cast<unsigned char>(s[at]) << 8) | static_cast<unsigned char>(s[at + 1]));
}

}  // namespace

DnsServer::DnsServer() {
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd_ >= 0) ::close(fd_);
    throw std::runtime_error("dns server: cannot bind 127.0.0.1");
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

DnsServer::~DnsServer() {
  stopping_ = true;
  thread_.join();
  ::close(fd_);
}

void DnsServer::set(const std::string& name, Answer a) {
  std::lock_guard lock(mutex_);
  answers_[name] = std::move(a);
}

std::size_t DnsServer::queries(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = queries_.find(name);
  return it == queries_.end() ? 0 : it->second;
}

void DnsServer::serve() {
  while (!stopping_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[1500];
    sockaddr_storage from{};
    socklen_t from_len = sizeof from;
    auto const n = ::recvfrom(fd_, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 12) continue;
    auto const reply = answer(std::string(buf, static_cast<std::size_t>(n)));
    if (!reply.empty()) ::sendto(fd_, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), from_len);
  }
}

std::string DnsServer::answer(const std::string& q) {
  // The question: labels up to the root, then its type and class.
  std::string name;
  std::size_t at = 12;
  while (at < q.size() && q[at] != 0) {
    auto const len = static_cast<unsigned char>(q[at]);
    if (len > 63 || at + 1 + len > q.size()) return {};
    if (!name.empty()) name += '.';
    for (std::size_t i = 0; i < len; ++i) name += static_cast<char>(std::tolower(static_cast<unsigned char>(q[at + 1 + i])));
    at += 1 + len;
  }
  if (at + 5 > q.size()) return {};
  std::size_t const question_end = at + 5;
  std::uint16_t const qtype = get16(q, at + 1);
  Answer a;
  bool known = false;
  {
    std::lock_guard lock(mutex_);
    ++queries_[name];
    if (auto it = answers_.find(name); it != answers_.end()) a = it->second, known = true;
  }
  if (stalled_ || a.silent) return {};
  int const rcode = known ? a.rcode : 3;
  std::vector<std::string> rdata;
  if (rcode == 0) {
    for (auto const& text : a.addresses) {
      in_addr v4{};
      in6_addr v6{};
      if (qtype == type_a && ::inet_pton(AF_INET, text.c_str(), &v4) == 1)
        rdata.emplace_back(reinterpret_cast<const char*>(&v4), 4);
      else if (qtype == type_aaaa && ::inet_pton(AF_INET6, text.c_str(), &v6) == 1)
        rdata.emplace_back(reinterpret_cast<const char*>(&v6), 16);
    }
  }
  std::string out = q.substr(0, 2);  // the query's id
  put16(out, static_cast<std::uint16_t>(0x8000 | (get16(q, 2) & 0x0100) | 0x0080 | rcode));  // QR, RD as asked, RA
  put16(out, 1);
  put16(out, static_cast<std::uint16_t>(rdata.size()));
  put16(out, 0);
  put16(out, 0);
  out += q.substr(12, question_end - 12);
  for (auto const& r : rdata) {
    put16(out, 0xC00C);  // the name: a pointer to the question's
    put16(out, qtype);
    put16(out, 1);  // IN
    put32(out, a.ttl);
    put16(out, static_cast<std::uint16_t>(r.size()));
    out += r;
  }
  return out;
}

}  // namespace itest
