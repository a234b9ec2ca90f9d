#include "proxy/wire/framing.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

#include <vector>

namespace rebound::http {

namespace bhttp = boost::beast::http;

std::optional<framing_problem> check_request_framing(const head_fields& f, unsigned version) {
  std::vector<std::string> codings;
  bool has_te = false;
  for (auto const& h : f) {
    if (h.name() != bhttp::field::transfer_encoding) continue;
    has_te = true;
    for (auto token : bhttp::token_list{h.value()}) codings.emplace_back(token);
  }
  if (!has_te) return std::nullopt;
  if (version < 11) return framing_problem{400, "Transfer-Encoding in an HTTP/1.0 request"};
  if (f.count(bhttp::field::content_length) > 0)
    return framing_problem{400, "Content-Length together with Transfer-Encoding"};
  if (codings.empty() || !boost::beast::iequals(codings.back(), "chunked"))
    return framing_problem{400, "Transfer-Encoding whose final coding is not chunked"};
  // Only chunked is relayed: another coding would reach the upstream undeclared once the
  // hop-by-hop Transfer-Encoding field is replaced.
  if (codings.size() > 1) return framing_problem{501, "transfer codings other than chunked are not implemented"};
  return std::nullopt;
}

void frame_whole_body(request_message<bhttp::buffer_body>& req, std::size_t size) {
  req.chunked(false);
  auto const m = req.method();
  if (size > 0 || m == bhttp::verb::post || m == bhttp::verb::put || m == bhttp::verb::patch)
    req.content_length(size);
  else
    req.erase(bhttp::field::content_length);
}

}  // namespace rebound::http
