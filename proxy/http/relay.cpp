#include "proxy/http/relay.hpp"

#include "proxy/wire/hop_by_hop.hpp"
#include "proxy/wire/wire_head.hpp"

#include <boost/asio/ssl/error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <array>
#include <optional>

namespace rebound::http {
namespace {

/// A body that has streamed this much moves to a large buffer.
constexpr std::uint64_t large_after = 2 * runtime::relay_buffers::small_size;

/** One write of what is ready to go: the head if it has not gone yet, then body bytes in the
    outgoing framing (a chunk, or as they are), then the end of a chunked body when `last`.
    A single gather write, so a small message leaves in one sendmsg. */
struct outgoing_piece {
  std::array<char, 20> size_line{};
  std::string trailer_chunk;
  std::array<net::const_buffer, 5> buffers{};

  template <class Trailers>
  void frame(std::string_view head, std::string_view data, bool chunked, bool last, const Trailers& trailers) {
    std::size_t n = 0;
    buffers = {};
    if (!head.empty()) buffers[n++] = net::buffer(head);
    if (chunked) {
      if (!data.empty()) {
        buffers[n++] = net::buffer(chunk_size_line(size_line, data.size()));
        buffers[n++] = net::buffer(data);
        buffers[n++] = net::buffer("\r\n", 2);
      }
      if (last) {
        // Trailers can travel only in a chunked message.
        if (trailers.begin() != trailers.end()) {
          trailer_chunk = last_chunk_with(trailers);
          buffers[n++] = net::buffer(trailer_chunk);
        } else {
          buffers[n++] = net::buffer(last_chunk);
        }
      }
    } else if (!data.empty()) {
      buffers[n++] = net::buffer(data);
    }
  }
};

/// Whether the head the caller wrote frames the body in chunks: a request's fields are its
/// message's; an upstream's response has them in its field list (message_rewrite.hpp).
bool chunked_out(const request_parser& p) { return p.get().chunked(); }
bool chunked_out(const response_parser& p) {
  return p.fields()[bhttp::field::transfer_encoding] == "chunked";
}

/// Where the parser puts a body's bytes on their way out: a relay buffer from the worker's
/// spares, given back when the relay ends.
struct body_room {
  std::optional<runtime::relay_buffers::lease> lease;
  char* data = nullptr;
  std::size_t size = 0;

  void take(runtime::relay_buffers* from, std::size_t n) {
    lease.reset();
    lease.emplace(runtime::relay_buffers::take_from(from, n));
    data = lease->data();
    size = lease->size();
  }
};

/// A body that has streamed past large_after reads through the large size: a quarter of the
/// reads, writes and resumptions per MiB (relay_buffers.hpp).
bool grows_large(beast::flat_buffer& buffer, std::uint64_t received) {
  if (received <= large_after) return false;
  if (buffer.capacity() < runtime::relay_buffers::large_size && buffer.max_size() >= runtime::relay_buffers::large_size)
    buffer.reserve(runtime::relay_buffers::large_size);
  return true;
}

/// Each read must progress within `idle`; a request body also keeps to its pace.
template <class From>
void arm_read_deadline(From& from, const relay_pacing& how, std::uint64_t received) {
  if (how.pace)
    from.expires_at(std::min(std::chrono::steady_clock::now() + how.idle, how.pace->deadline(received)));
  else
    from.expires_after(how.idle);
}

template <class From, class Parser, class To>
net::awaitable<relay_result> relay(body_from<From, Parser> source, To& to, std::string_view head,
                                   std::string_view prefix, relay_pacing how) {
  auto& from = source.stream;
  auto& buffer = source.buffer;
  auto& p = source.parser;
  auto const idle = how.idle;
  auto* buffers = how.buffers;
  std::uint64_t received = prefix.size();
  auto& body = p.get().body();
  make_room_for_body(buffer, p.content_length_remaining());
  body_room room;
  if (!p.is_done()) room.take(buffers, runtime::relay_buffers::small_size);  // none for a message without a body
  // The outgoing framing is what the fields the caller set say.
  bool const chunked = chunked_out(p);
  outgoing_piece out;
  auto send = [&](std::string_view data, bool last) {
    out.frame(head, data, chunked, last, p.trailers());
    head = {};
    to.expires_after(idle);
    return net::async_write(to, out.buffers, use_tuple);
  };
  if (!prefix.empty()) {
    auto [ec, n] = co_await send(prefix, p.is_done());
    if (ec) co_return relay_result{{}, ec};
    if (p.is_done()) co_return relay_result{};
  }
  // The head goes out at once when no body bytes wait to go with it: a client should see
  // the status before a slow body. Otherwise head and first bytes share one write (one
  // syscall fewer per exchange, the common case for small messages).
  if (!head.empty() && !p.is_done() && buffer.size() == 0) {
    auto [ec, n] = co_await send({}, false);
    if (ec) co_return relay_result{{}, ec};
  }
  for (;;) {
    std::string_view data;
    if (!p.is_done()) {
      if (room.size < runtime::relay_buffers::large_size && grows_large(buffer, received))
        room.take(buffers, runtime::relay_buffers::large_size);
      body.data = room.data;
      body.size = room.size;
      auto ec = parse_buffered(buffer, p);
      if (ec == bhttp::error::need_more) {
        arm_read_deadline(from, how, received);
        // read_some, not read: read waits until the chunk is full, which would hold back a
        // slow stream's first bytes.
        auto [rec, n] = co_await bhttp::async_read_some(from, buffer, p, use_tuple);
        ec = rec;
        if (ec == net::ssl::error::stream_truncated) {
          // A TLS server closed without close_notify: the end of a body that runs to the
          // close, or a cut message; the parser tells which, as Beast does for TCP's EOF.
          error_code eof_ec;
          p.put_eof(eof_ec);
          ec = eof_ec ? error_code(bhttp::error::partial_message) : error_code{};
        }
      }
      if (ec && ec != bhttp::error::need_buffer) co_return relay_result{ec, {}};
      auto const got = room.size - body.size;
      received += got;
      if (got == 0 && !p.is_done()) continue;  // only framing was parsed
      data = std::string_view(room.data, got);
    }
    bool const last = p.is_done();
    auto [ec, n] = co_await send(data, last);
    if (ec) co_return relay_result{{}, ec};
    if (last) co_return relay_result{};
  }
}

/// A read that ended a body of known length before its end: Beast's word for it, whether the
/// peer closed (EOF) or a TLS peer closed without close_notify.
error_code cut_short(error_code ec) {
  if (ec == net::error::eof || ec == net::ssl::error::stream_truncated) return bhttp::error::partial_message;
  return ec;
}

/** A body of known length that goes out framed as it came: read into the read buffer and
    written from there. Through the parser every byte was copied once more, into a relay
    buffer (6% of the CPU of a 1 MiB response; HAProxy sends from the buffer it read into),
    and a large body held that 64 KiB buffer beside the read buffer's. Bytes past the body
    stay in the buffer, as the parser leaves them: a pipelined request, or bytes an upstream
    sent past what it announced (its connection is then not pooled). The parser is left
    mid-body: the caller knows the body ended from the result. */
template <class From, class Parser, class To>
net::awaitable<relay_result> relay_sized(body_from<From, Parser> source, std::uint64_t left, To& to,
                                         std::string_view head, std::string_view prefix, relay_pacing how) {
  auto& from = source.stream;
  auto& buffer = source.buffer;
  std::uint64_t received = prefix.size();
  make_room_for_body(buffer, left);
  for (;;) {
    // The head goes out alone when no body bytes wait to go with it (the other side sees it
    // before a slow body); otherwise with the first bytes, in one write.
    auto const ready = static_cast<std::size_t>(std::min<std::uint64_t>(left, buffer.size()));
    if (ready > 0 || !head.empty() || !prefix.empty()) {
      std::array<net::const_buffer, 3> const out{net::buffer(head), net::buffer(prefix),
                                                 net::buffer(buffer.data().data(), ready)};
      to.expires_after(how.idle);
      auto [ec, n] = co_await net::async_write(to, out, use_tuple);
      if (ec) co_return relay_result{{}, ec};
      head = {};
      prefix = {};
      buffer.consume(ready);
      left -= ready;
      received += ready;
      if (left == 0) co_return relay_result{};
    }
    // Empty here: what it held was body, and went out.
    grows_large(buffer, received);
    arm_read_deadline(from, how, received);
    auto [ec, n] =
        co_await from.async_read_some(buffer.prepare(std::min(buffer.capacity(), buffer.max_size())), use_tuple);
    buffer.commit(n);
    if (ec && n == 0) co_return relay_result{cut_short(ec), {}};
  }
}

/// Whether a body can go out by relay_sized: its length is known, some of it is still to
/// come, and it goes out framed as it came.
template <class Parser>
bool goes_as_sized(const Parser& p) {
  auto const left = p.content_length_remaining();
  return left && *left > 0 && !p.is_done() && !chunked_out(p);
}

}  // namespace

void make_room_for_body(beast::flat_buffer& buffer, const boost::optional<std::uint64_t>& left) {
  constexpr auto room = runtime::relay_buffers::small_size;
  if (buffer.capacity() < room && buffer.max_size() >= room && !(left && *left <= buffer.size())) buffer.reserve(room);
}

net::awaitable<error_code> relay_interim(beast::tcp_stream& client, response_parser& head,
                                         std::chrono::milliseconds idle) {
  strip_hop_by_hop(head.fields());
  std::string wire;
  append_head(wire, head);
  client.expires_after(idle);
  auto [ec, n] = co_await net::async_write(client, net::buffer(wire), use_tuple);
  co_return ec;
}

net::awaitable<relay_result> relay_request_body(request_body_from from, upstream::connection& to, std::string_view head,
                                                std::string_view prefix, const relay_pacing& how) {
  if (goes_as_sized(from.parser))
    return relay_sized(from, *from.parser.content_length_remaining(), to, head, prefix, how);
  return relay(from, to, head, prefix, how);
}

net::awaitable<relay_result> relay_response_body(response_body_from from, beast::tcp_stream& to, std::string_view head,
                                                 const relay_pacing& how) {
  if (goes_as_sized(from.parser)) return relay_sized(from, *from.parser.content_length_remaining(), to, head, {}, how);
  return relay(from, to, head, {}, how);
}

}  // namespace rebound::http
