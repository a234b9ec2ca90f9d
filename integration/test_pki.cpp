#include "test_pki.hpp"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace itest {
namespace {

EVP_PKEY* new_key() {
  EVP_PKEY* k = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  if (!k) throw std::runtime_error("test pki: key generation failed");
  return k;
}

void add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) throw std::runtime_error("test pki: bad extension " + value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

X509* new_cert(EVP_PKEY* key, const std::string& cn, long serial, std::chrono::seconds nb, std::chrono::seconds na) {
  X509* c = X509_new();
  X509_set_version(c, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c), serial);
  X509_gmtime_adj(X509_getm_notBefore(c), static_cast<long>(nb.count()));
  X509_gmtime_adj(X509_getm_notAfter(c), static_cast<long>(na.count()));
  X509_set_pubkey(c, key);
  X509_NAME* name = X509_get_subject_name(c);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return c;
}

void write_pem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error("test pki: cannot write " + path);
  bool ok =
      cert ? PEM_write_X509(f, cert) == 1 : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(f);
  if (!ok) throw std::runtime_error("test pki: PEM write failed for " + path);
}

bool is_ip(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

}  // namespace

TestPki::TestPki() {
  char tmpl[] = "/tmp/rebound-pki-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("test pki: mkdtemp failed");
  dir_ = tmpl;
  auto* key = new_key();
  static long serial = 1;
  X509* ca = new_cert(key, "rebound test CA", serial++, std::chrono::hours(-1), std::chrono::hours(24));
  X509_set_issuer_name(ca, X509_get_subject_name(ca));
  add_ext(ca, ca, NID_basic_constraints, "critical,CA:TRUE");
  add_ext(ca, ca, NID_key_usage, "critical,keyCertSign,cRLSign");
  add_ext(ca, ca, NID_subject_key_identifier, "hash");
  X509_sign(ca, key, EVP_sha256());
  ca_file_ = dir_ + "/ca.pem";
  write_pem(ca_file_, ca, nullptr);
  ca_key_ = key;
  ca_cert_ = ca;
}

TestPki::~TestPki() {
  X509_free(static_cast<X509*>(ca_cert_));
  EVP_PKEY_free(static_cast<EVP_PKEY*>(ca_key_));
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

IssuedCert TestPki::issue(const std::string& file_stem, const std::vector<std::string>& names, std::chrono::seconds nb,
                          std::chrono::seconds na) {
  static long serial = 1000;
  auto* ca = static_cast<X509*>(ca_cert_);
  auto* key = new_key();
  X509* c = new_cert(key, names.empty() ? file_stem : names.front(), serial++, nb, na);
  X509_set_issuer_name(c, X509_get_subject_name(ca));
  add_ext(c, ca, NID_basic_constraints, "critical,CA:FALSE");
  add_ext(c, ca, NID_key_usage, "critical,digitalSignature");
  add_ext(c, ca, NID_ext_key_usage, "serverAuth,clientAuth");
  add_ext(c, ca, NID_authority_key_identifier, "keyid");
  if (!names.empty()) {
    std::string san;
    for (auto const& n : names) san += (san.empty() ? "" : ",") + std::string(is_ip(n) ? "IP:" : "DNS:") + n;
    add_ext(c, ca, NID_subject_alt_name, san);
  }
  X509_sign(c, static_cast<EVP_PKEY*>(ca_key_), EVP_sha256());
  IssuedCert out{dir_ + "/" + file_stem + ".crt", dir_ + "/" + file_stem + ".key"};
  write_pem(out.cert_file, c, nullptr);
  write_pem(out.key_file, nullptr, key);
  X509_free(c);
  EVP_PKEY_free(key);
  return out;
}

}  // namespace itest
