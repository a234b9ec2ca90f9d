// The path a client's bytes take before anything is sent upstream: Beast's parser bounded by
// rebound's field limits, the framing (smuggling) checks, the request-target parser, the loop
// guard, the upgrade rules, the upstream rewrite, then the body in relay-sized pieces with its trailers.
// Any input must end in a parsed request or an error value: never a crash, a throw, a leak.
#include "proxy/wire/bounded_parser.hpp"
#include "proxy/wire/framing.hpp"
#include "proxy/wire/hop_by_hop.hpp"
#include "proxy/wire/upgrade.hpp"
#include "proxy/plan/loop_guard.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/plan/request_target.hpp"

#include <boost/asio/buffer.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace bhttp = boost::beast::http;
using namespace rebound::http;
using namespace rebound::plan;

namespace {

// Feeds `in` to the parser the way a socket would: in short reads, so state carried between
// reads (a chunk size or a field split across them) is exercised too. The body lands in
// buffer_body's caller-owned buffer, 4 KiB at a time, as the relay does it.
void feed(request_parser& p, std::string_view in, std::size_t step, boost::system::error_code& ec) {
  std::string buffered;
  std::array<char, 4096> body{};
  while (!p.is_done()) {
    if (buffered.empty() || ec == bhttp::error::need_more) {
      if (in.empty()) return;  // the client stopped sending: the request stays incomplete
      auto const take = std::min(in.size(), step);
      buffered.append(in.substr(0, take));
      in.remove_prefix(take);
    }
    ec = {};
    if (p.is_header_done()) {
      p.get().body().data = body.data();
      p.get().body().size = body.size();
    }
    auto const used = p.put(boost::asio::buffer(buffered), ec);
    buffered.erase(0, used);
    if (ec == bhttp::error::need_buffer)
      ec = {};
    else if (ec && ec != bhttp::error::need_more)
      return;
    else if (!ec && used == 0)
      ec = bhttp::error::need_more;  // nothing to parse without more input
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  // The first byte picks the read size (1..256) so short and long reads are both explored.
  std::size_t const step = 1 + data[0];
  std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);

  request_parser p;
  p.header_limit(16 * 1024);
  p.body_limit(1024 * 1024);
  boost::system::error_code ec;
  feed(p, in, step, ec);
  // The head is vetted as soon as it is complete, whatever later happens to the body.
  if (!p.is_header_done()) return 0;

  auto const& req = p.get();
  if (check_request_framing(req.base(), req.version())) return 0;
  // An upgrade is read from the head alone; a WebSocket one keeps its fields across the hop.
  bool const websocket = read_upgrade(req.base()).what == upgrade_ask::kind::websocket;
  auto target = req.method() == bhttp::verb::connect
                    ? parse_connect_target(req.target())
                    : parse_request_target(req.method_string(), req.target(), req[bhttp::field::host],
                                           req.count(bhttp::field::host), req.version());
  if (!target.value) return 0;
  (void)via_names_instance(req.base(), "0123abcd");
  request_message<bhttp::buffer_body> upstream;
  prepare_upstream_request(upstream, p, *target.value, "0123abcd");
  if (websocket) carry_websocket_upgrade(upstream.base());
  (void)pool_key(*target.value, nullptr);
  (void)path_of(target.value->origin_form);
  for (auto const& f : p.trailers()) (void)forwardable_trailer(f.name(), f.name_string());
  return 0;
}
