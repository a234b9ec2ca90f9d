// A throw-away certificate authority for the TLS tests, made with OpenSSL's library in a
// temporary directory: a CA, and server or client certificates it issues with chosen names
// and validity (an expired one included), all as PEM files.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace itest {

struct IssuedCert {
  std::string cert_file;  // PEM certificate
  std::string key_file;   // PEM private key (unencrypted)
};

class TestPki {
 public:
  TestPki();  // makes the directory and the CA (EC P-256, valid for a day)
  ~TestPki();
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  const std::string& ca_file() const { return ca_file_; }

  // A certificate for `names` (DNS names; an IP literal becomes an IP SAN), valid from
  // now + not_before to now + not_after (negative: in the past).
  IssuedCert issue(const std::string& file_stem, const std::vector<std::string>& names,
                   std::chrono::seconds not_before = std::chrono::hours(-1),
                   std::chrono::seconds not_after = std::chrono::hours(24));

 private:
  std::string dir_;
  std::string ca_file_;
  void* ca_key_ = nullptr;   // EVP_PKEY*
  void* ca_cert_ = nullptr;  // X509*
};

}  // namespace itest
