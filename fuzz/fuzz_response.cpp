// An upstream's answer as the relay reads it: a bounded response parser (1xx, trailers,
// chunked, close-delimited bodies), then the rewrite into the client's head and its bytes.
#include "proxy/wire/bounded_parser.hpp"
#include "proxy/wire/hop_by_hop.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/wire/wire_head.hpp"

#include <boost/asio/buffer.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace bhttp = boost::beast::http;
using namespace rebound::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  bool const is_head = data[0] & 1;
  unsigned const client_version = (data[0] & 2) ? 10 : 11;
  std::string buffered(reinterpret_cast<const char*>(data + 1), size - 1);

  field_list fields;
  response_parser p(fields);
  p.header_limit(16 * 1024);
  p.body_limit(boost::none);  // responses are relayed, never held whole
  if (is_head) p.skip(true);
  boost::system::error_code ec;
  auto used = p.put(boost::asio::buffer(buffered), ec);
  if (ec == bhttp::error::need_more) return 0;
  if (ec) return 0;
  buffered.erase(0, used);

  (void)prepare_client_response(p, {is_head, client_version, true, 1});
  std::string head;
  append_head(head, p);

  std::array<char, 4096> body{};
  while (!p.is_done()) {
    p.get().body().data = body.data();
    p.get().body().size = body.size();
    auto const n = p.put(boost::asio::buffer(buffered), ec);
    buffered.erase(0, n);
    if (ec == bhttp::error::need_buffer) {
      ec = {};
      continue;
    }
    if (ec == bhttp::error::need_more) {
      // The upstream closed: a close-delimited body ends here, anything else is truncated.
      ec = {};
      p.put_eof(ec);
      break;
    }
    if (ec) return 0;
    if (n == 0 && p.get().body().size == body.size()) break;
  }
  for (auto const& f : p.trailers()) (void)forwardable_trailer(f.name(), f.name_string());
  return 0;
}
