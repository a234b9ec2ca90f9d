#include "proxy/inbound/fingerprint.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

namespace rebound::inbound {
namespace {

void write_canonical(const boost::json::value& v, std::string& out) {
  switch (v.kind()) {
    case boost::json::kind::object: {
      auto const& o = v.get_object();
      std::vector<const boost::json::key_value_pair*> members;
      members.reserve(o.size());
      for (auto const& kv : o) members.push_back(&kv);
      std::sort(members.begin(), members.end(), [](auto a, auto b) { return a->key() < b->key(); });
      out += '{';
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (i) out += ',';
        out += boost::json::serialize(boost::json::string(members[i]->key()));
        out += ':';
        write_canonical(members[i]->value(), out);
      }
      out += '}';
      return;
    }
    case boost::json::kind::array: {
      out += '[';
      bool first = true;
      for (auto const& e : v.get_array()) {
        if (!first) out += ',';
        first = false;
        write_canonical(e, out);
      }
      out += ']';
      return;
    }
    default:
      out += boost::json::serialize(v);
  }
}

bool names_json(std::string_view content_type) {
  auto const media = content_type.substr(0, content_type.find(';'));
  std::string lower(media);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  while (!lower.empty() && (lower.back() == ' ' || lower.back() == '\t')) lower.pop_back();
  return lower == "application/json" || lower.ends_with("+json");
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

std::string canonical_json(std::string_view body, bool& ok) {
  boost::system::error_code ec;
  auto const v = boost::json::parse(body, ec);
  ok = !ec;
  if (!ok) return {};
  std::string out;
  write_canonical(v, out);
  return out;
}

std::string payload_fingerprint(std::string_view method, std::string_view target, std::string_view content_type,
                                std::string_view body) {
  std::string material;
  material.reserve(method.size() + target.size() + body.size() + 4);
  material.append(method).append("\n").append(target).append("\n");
  bool canonical = false;
  if (names_json(content_type)) {
    auto c = canonical_json(body, canonical);
    if (canonical) material += c;
  }
  if (!canonical) material.append(body);
  return sha256_hex(material);
}

}  // namespace rebound::inbound
