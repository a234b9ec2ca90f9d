// A small strict JSON parser, enough to check the shape of rebound's error bodies.
#include "client.hpp"

#include <cctype>
#include <cstdlib>

namespace itest {

const Json* Json::get(std::string_view key) const {
  if (type != Type::object) return nullptr;
  for (auto const& [k, v] : o)
    if (k == key) return &v;
  return nullptr;
}

namespace {

struct Parser {
  std::string_view in;
  std::size_t i = 0;
  int depth = 0;

  void ws() {
    while (i < in.size() && (in[i] == ' ' || in[i] == '\t' || in[i] == '\n' || in[i] == '\r')) ++i;
  }
  bool lit(std::string_view w) {
    if (in.substr(i, w.size()) != w) return false;
    i += w.size();
    return true;
  }
  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool hex4(unsigned& v) {
    if (i + 4 > in.size()) return false;
    v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = in[i++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        return false;
    }
    return true;
  }
  bool string(std::string& out) {
    if (i >= in.size() || in[i] != '"') return false;
    ++i;
    while (i < in.size()) {
      char c = in[i++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= in.size()) return false;
      char e = in[i++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            unsigned lo;
            if (!lit("\\u") || !hex4(lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(out, cp);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  bool number(Json& v) {
    std::size_t start = i;
    if (i < in.size() && in[i] == '-') ++i;
    if (i >= in.size() || !std::isdigit(static_cast<unsigned char>(in[i]))) return false;
    if (in[i] == '0')
      ++i;
    else
      while (i < in.size() && std::isdigit(static_cast<unsigned char>(in[i]))) ++i;
    if (i < in.size() && in[i] == '.') {
      ++i;
      if (i >= in.size() || !std::isdigit(static_cast<unsigned char>(in[i]))) return false;
      while (i < in.size() && std::isdigit(static_cast<unsigned char>(in[i]))) ++i;
    }
    if (i < in.size() && (in[i] == 'e' || in[i] == 'E')) {
      ++i;
      if (i < in.size() && (in[i] == '+' || in[i] == '-')) ++i;
      if (i >= in.size() || !std::isdigit(static_cast<unsigned char>(in[i]))) return false;
      while (i < in.size() && std::isdigit(static_cast<unsigned char>(in[i]))) ++i;
    }
    v.type = Json::Type::number;
    v.n = std::strtod(std::string(in.substr(start, i - start)).c_str(), nullptr);
    return true;
  }
  bool value(Json& v) {
    if (++depth > 64) return false;
    ws();
    if (i >= in.size()) return false;
    bool ok = false;
    char c = in[i];
    if (c == '{') {
      ++i;
      v.type = Json::Type::object;
      ws();
      if (i < in.size() && in[i] == '}') {
        ++i;
        ok = true;
      } else {
        for (;;) {
          ws();
          std::string key;
          Json member;
          if (!string(key)) break;
          ws();
          if (i >= in.size() || in[i] != ':') break;
          ++i;
          if (!value(member)) break;
          v.o.emplace_back(std::move(key), std::move(member));
          ws();
          if (i < in.size() && in[i] == ',') {
            ++i;
            continue;
          }
          if (i < in.size() && in[i] == '}') {
            ++i;
            ok = true;
          }
          break;
        }
      }
    } else if (c == '[') {
      ++i;
      v.type = Json::Type::array;
      ws();
      if (i < in.size() && in[i] == ']') {
        ++i;
        ok = true;
      } else {
        for (;;) {
          Json item;
          if (!value(item)) break;
          v.a.push_back(std::move(item));
          ws();
          if (i < in.size() && in[i] == ',') {
            ++i;
            continue;
          }
          if (i < in.size() && in[i] == ']') {
            ++i;
            ok = true;
          }
          break;
        }
      }
    } else if (c == '"') {
      v.type = Json::Type::string;
      ok = string(v.s);
    } else if (lit("true")) {
      v.type = Json::Type::boolean;
      v.b = ok = true;
    } else if (lit("false")) {
      v.type = Json::Type::boolean;
      ok = true;
    } else if (lit("null")) {
      ok = true;
    } else {
      ok = number(v);
    }
    --depth;
    return ok;
  }
};

}  // namespace

std::optional<Json> parse_json(std::string_view text) {
  Parser p{text};
  Json v;
  if (!p.value(v)) return std::nullopt;
  p.ws();
  if (p.i != text.size()) return std::nullopt;
  return v;
}

}  // namespace itest
