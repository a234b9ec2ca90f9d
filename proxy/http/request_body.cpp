#include "proxy/http/request_body.hpp"

#include "proxy/http/cancel_at.hpp"

#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include <algorithm>

namespace rebound::http {
namespace {

/// How much of a kept body one read takes at most: the room make_room_for_body gives.
constexpr std::size_t body_read_size = runtime::relay_buffers::small_size;

}  // namespace

std::optional<error_reply> unmet_expectation(const request_message<bhttp::buffer_body>& req) {
  auto const it = req.find(bhttp::field::expect);
  if (it == req.end() || req.version() < 11 || beast::iequals(it->value(), "100-continue")) return std::nullopt;
  return error_reply{417, error_type::bad_request, "only Expect: 100-continue is supported", {}, 0};
}

net::awaitable<bool> send_continue(beast::tcp_stream& client, std::chrono::milliseconds idle) {
  static constexpr std::string_view continue_line = "HTTP/1.1 100 Continue\r\n\r\n";
  client.expires_after(idle);
  auto [ec, n] = co_await net::async_write(client, net::buffer(continue_line), use_tuple);
  co_return !ec;
}

net::awaitable<kept_body> read_whole_body(const client_request& r, std::string& out, std::size_t limit) {
  auto& client = r.client;
  auto& buffer = r.buffer;
  auto& parser = r.parser;
  auto const idle = r.ctx.cfg().limits.idle_timeout;
  auto const pace = pace_of(r.ctx.cfg(), std::chrono::steady_clock::now());
  // A Content-Length is the client's claim: at most what may be kept is reserved for it
  // (10^15 would be std::bad_alloc), and reading stops past `limit` whatever it said.
  if (auto cl = parser.content_length()) out.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(*cl, limit + 1)));
  make_room_for_body(buffer, parser.content_length_remaining());
  // The parser writes the body straight into `out`, grown a read's worth ahead of it.
  std::size_t got = out.size();
  auto& body = parser.get().body();
  while (!parser.is_done() && got <= limit) {
    auto const left = parser.content_length_remaining();
    auto const room = static_cast<std::size_t>(std::min<std::uint64_t>(left.value_or(body_read_size), body_read_size));
    if (out.size() < got + room) out.resize(got + room);
    body.data = out.data() + got;
    body.size = out.size() - got;
    auto ec = parse_buffered(buffer, parser);
    if (ec == bhttp::error::need_more) {
      client.expires_after(idle);
      std::optional<cancel_at> due;
      due.emplace(client.socket(), pace.deadline(got));
      auto [rec, n] = co_await bhttp::async_read_some(client, buffer, parser, use_tuple);
      ec = rec;
      if (due->fired()) ec = beast::error::timeout;  // too slow: the socket is still open for the 408
      due.reset();
    }
    got = out.size() - body.size;
    if (ec && ec != bhttp::error::need_buffer) {
      out.resize(got);
      if (auto refusal = body_read_refusal(ec, parser)) co_return kept_body{std::move(*refusal)};
      co_return kept_body{error_reply{0, error_type::bad_request, "client went away", {}, 0}};
    }
  }
  out.resize(got);
  co_return kept_body{std::nullopt, got > limit};
}

body_pace pace_of(const config::config& cfg, std::chrono::steady_clock::time_point start) {
  return body_pace{start, std::chrono::duration_cast<std::chrono::milliseconds>(cfg.limits.body_timeout),
                   cfg.limits.min_body_rate};
}

std::optional<error_reply> body_read_refusal(const error_code& ec, const request_parser& parser) {
  if (ec == beast::error::timeout)
    return error_reply{408,
                       error_type::bad_request,
                       "request body arrived too slowly (limits.body_timeout, limits.min_body_rate) or stalled",
                       {},
                       0};
  if (ec == bhttp::error::body_limit) return error_reply{413, error_type::bad_request, "request body too large", {}, 0};
  if (ec == bhttp::error::header_limit && parser.refusal() == field_refusal::trailer_section)
    return error_reply{400, error_type::bad_request, "trailer section too large", {}, 0};
  if (ec == bhttp::error::buffer_overflow)
    return error_reply{400, error_type::bad_request, "chunk-size line or trailer section too large", {}, 0};
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_chunk).category() &&
      ec != bhttp::error::partial_message)
    return error_reply{400, error_type::bad_request, "malformed request body: " + ec.message(), {}, 0};
  return std::nullopt;  // the client went away or stalled: nobody to answer
}

net::awaitable<whole_body> take_whole_body(const client_request& r, std::string& body, std::size_t limit) {
  auto& parser = r.parser;
  if (auto const cl = parser.content_length(); cl && *cl > limit) co_return whole_body{whole_body::end::too_large, {}};
  if (parser.is_done()) co_return whole_body{};
  auto const& req = parser.get();
  auto const idle = r.ctx.cfg().limits.idle_timeout;
  if (req.version() >= 11 && req.count(bhttp::field::expect) > 0 && !co_await send_continue(r.client, idle))
    co_return whole_body{whole_body::end::client_gone, {}};
  auto kept = co_await read_whole_body(r, body, limit);
  if (kept.problem) {
    if (kept.problem->status == 0) co_return whole_body{whole_body::end::client_gone, {}};
    co_return whole_body{whole_body::end::refused, std::move(kept.problem)};
  }
  if (kept.overflow || body.size() > limit) co_return whole_body{whole_body::end::too_large, {}};
  co_return whole_body{};
}

}  // namespace rebound::http
