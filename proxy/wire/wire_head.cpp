#include "proxy/wire/wire_head.hpp"

#include "proxy/wire/hop_by_hop.hpp"

#include <charconv>
#include <cstring>

namespace rebound::http {
namespace {

namespace bhttp = boost::beast::http;

void append_version(std::string& out, unsigned version) {
  out += "HTTP/";
  out += static_cast<char>('0' + version / 10);
  out += '.';
  out += static_cast<char>('0' + version % 10);
}

template <class Field>
void append_field(std::string& out, const Field& field) {
  auto const name = field.name_string();
  auto const value = field.value();
  out.append(name.data(), name.size());
  out += ": ";
  out.append(value.data(), value.size());
  out += "\r\n";
}

/// Sized first, then copied: appending piece by piece checked the capacity four times per
/// field, a sixth of the head's cost.
template <class Fields>
void append_fields(std::string& out, const Fields& f) {
  std::size_t size = 2;
  for (auto const& field : f) size += field.name_string().size() + field.value().size() + 4;
  auto const at = out.size();
  out.resize(at + size);
  char* to = out.data() + at;
  auto const put = [&to](const char* from, std::size_t n) {
    std::memcpy(to, from, n);
    to += n;
  };
  for (auto const& field : f) {
    auto const name = field.name_string();
    auto const value = field.value();
    put(name.data(), name.size());
    put(": ", 2);
    put(value.data(), value.size());
    put("\r\n", 2);
  }
  put("\r\n", 2);
}

/// Most heads fit at once; a larger one grows the string once or twice.
constexpr std::size_t typical_head = 512;

}  // namespace

void append_head(std::string& out, const request_head& h) {
  auto const method = h.method_string();
  auto const target = h.target();
  out.reserve(out.size() + typical_head + target.size());
  out.append(method.data(), method.size());
  out += ' ';
  out.append(target.data(), target.size());
  out += ' ';
  append_version(out, h.version());
  out += "\r\n";
  append_fields(out, h);
}

void append_head(std::string& out, const response_parser& p) {
  out.reserve(out.size() + typical_head);
  out += "HTTP/1.1 ";
  std::array<char, 8> code{};
  auto const status = p.get().result_int();
  auto const [end, ec] = std::to_chars(code.data(), code.data() + code.size(), status);
  out.append(code.data(), end);
  out += ' ';
  std::string_view reason = p.get().reason();
  if (reason.empty()) reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  // Beast 1.81 has no reason of its own for 103 ("<unknown-status>"): RFC 8297's.
  if (status == 103 && reason.front() == '<') reason = "Early Hints";
  out.append(reason.data(), reason.size());
  out += "\r\n";
  append_fields(out, p.fields());
}

std::string_view chunk_size_line(std::array<char, 20>& buf, std::size_t n) {
  auto const [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size() - 2, n, 16);
  end[0] = '\r';
  end[1] = '\n';
  return {buf.data(), static_cast<std::size_t>(end + 2 - buf.data())};
}

std::string last_chunk_with(const head_fields& trailers) {
  std::string out = "0\r\n";
  for (auto const& f : trailers)
    if (forwardable_trailer(f.name(), f.name_string())) append_field(out, f);
  out += "\r\n";
  return out;
}

}  // namespace rebound::http
