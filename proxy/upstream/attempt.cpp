#include "proxy/upstream/attempt.hpp"

#include "proxy/upstream/credential_source.hpp"
#include "proxy/wire/upgrade.hpp"
#include "proxy/wire/wire_head.hpp"
#include "proxy/upstream/connect.hpp"
#include "proxy/upstream/resolver.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>

namespace rebound::upstream {

retry::attempt_failure read_failure(const error_code& ec) {
  if (ec == beast::error::timeout)
    return {http::error_type::attempt_timeout, "no response head within the attempt timeout"};
  if (ec == bhttp::error::end_of_stream || ends_stream(ec) || ec == net::error::connection_reset ||
      ec == bhttp::error::partial_message)
    return {http::error_type::connect_reset, "upstream closed the connection before a complete response head"};
  return {http::error_type::upstream_protocol_error, "invalid response from upstream: " + ec.message()};
}

net::awaitable<std::optional<retry::attempt_failure>> read_final_head(exchange& ex, bool is_head,
                                                                      clock::time_point deadline,
                                                                      interim_route& route) {
  auto& up = *ex.stream;
  auto& buffer = ex.buffer;
  auto& rp = ex.response;
  // Beast sizes a read by the buffer's free space, 512 bytes for a fresh one: a 1 KiB answer
  // then took three reads and went to the client in two writes. With room for a typical
  // answer up front it takes one of each, and the body relay finds the room it would have
  // reserved anyway (bench/README.md, "syscalls per request").
  if (buffer.capacity() < first_read_size) buffer.reserve(std::min(first_read_size, buffer.max_size()));
  for (;;) {
    rp.emplace(ex.fields);
    rp->header_limit(max_response_head);
    rp->body_limit(boost::none);
    if (is_head) rp->skip(true);
    up.expires_at(deadline);
    auto [ec, n] = co_await bhttp::async_read_header(up, buffer, *rp, use_tuple);
    if (ec) co_return read_failure(ec);
    auto const status = rp->get().result_int();
    if (status >= 200) co_return std::nullopt;
    if (status == 101) {
      if (!route.upgrade)
        co_return retry::attempt_failure{http::error_type::upstream_protocol_error,
                                         "upstream switched protocols unasked"};
      auto why = http::switch_mismatch(rp->fields());
      if (!why.empty()) co_return retry::attempt_failure{http::error_type::upstream_protocol_error, std::move(why)};
      co_return std::nullopt;
    }
    bool const is_100 = status == 100;
    if (!route.client || (is_100 && (!route.pass_100 || route.sent_100))) continue;
    if (auto wec = co_await route.client->interim(*rp)) {
      route.client = nullptr;
      // A client that cannot take the 100 will not send the body the upstream now waits for.
      if (is_100 && route.stop_at_100) co_return std::nullopt;
      continue;
    }
    if (is_100) {
      route.sent_100 = true;
      if (route.stop_at_100) co_return std::nullopt;
    }
  }
}

namespace {

/** Reads the rest of `ex`'s response, handing each piece to `keep` (null: dropped), at most
    `limit` body bytes by `deadline`, then pools the connection when the exchange ended cleanly
    and the upstream keeps it open. False when the body could not be read whole. */
net::awaitable<bool> finish_response(pool_slot back, exchange& ex, std::size_t limit, clock::time_point deadline,
                                     std::string* keep) {
  if (!ex.stream || !ex.response) co_return false;
  auto& rp = *ex.response;
  std::array<char, 16 * 1024> chunk;
  std::size_t read = 0;
  while (!rp.is_done()) {
    if (read > limit) co_return false;
    rp.get().body().data = chunk.data();
    rp.get().body().size = chunk.size();
    ex.stream->expires_at(deadline);
    auto [ec, n] = co_await bhttp::async_read_some(*ex.stream, ex.buffer, rp, use_tuple);
    if (ec && ec != bhttp::error::need_buffer) co_return false;
    auto const got = chunk.size() - rp.get().body().size;
    if (keep) keep->append(chunk.data(), got);
    read += got;
  }
  if (read > limit) co_return false;
  // Bytes past the response would be an answer to nothing: such a connection is not reused.
  if (rp.keep_alive() && ex.buffer.size() == 0) {
    ex.stream->expires_never();
    back.p.put(back.key, std::move(*ex.stream));
    ex.stream.reset();
  }
  co_return true;
}

}  // namespace

net::awaitable<void> settle(pool_slot back, exchange& ex, std::size_t limit, clock::time_point deadline) {
  co_await finish_response(back, ex, limit, deadline, nullptr);
}

net::awaitable<bool> read_response_body(pool_slot back, exchange& ex, std::string& out, std::size_t limit,
                                        clock::time_point deadline) {
  co_return co_await finish_response(back, ex, limit, deadline, &out);
}

net::awaitable<std::optional<retry::attempt_failure>> apply_credential(credential_source& source,
                                                                       http::request_message<bhttp::buffer_body>& req,
                                                                       clock::time_point deadline) {
  auto cred = co_await source.authorization(deadline);
  if (!cred.authorization)
    co_return retry::attempt_failure{http::error_type::auth_refresh_failed,
                                     "no valid credential for the upstream: " + cred.error};
  req.set(bhttp::field::authorization, *cred.authorization);
  co_return std::nullopt;
}

const std::vector<net::ip::address>* addresses_to_avoid(const net::executor& ex, const destination& to,
                                                        std::vector<net::ip::address>& scratch) {
  if (to.health) to.health->ejected_addresses(scratch);
  bool const retried = to.avoid && !to.avoid->empty();
  if (scratch.empty() && !retried) return nullptr;  // the common case: no resolver asked
  auto const& resolver = resolver_of(ex);
  if (scratch.empty()) return resolver.offers_another(to.host, *to.avoid) ? to.avoid : nullptr;
  if (retried)
    for (auto const& a : *to.avoid)
      if (std::find(scratch.begin(), scratch.end(), a) == scratch.end()) scratch.push_back(a);
  if (resolver.offers_another(to.host, scratch)) return &scratch;
  return retried && resolver.offers_another(to.host, *to.avoid) ? to.avoid : nullptr;
}

void remember_tried(std::vector<net::ip::address>& tried, const net::ip::address& a) {
  if (!a.is_unspecified() && std::find(tried.begin(), tried.end(), a) == tried.end()) tried.push_back(a);
}

void report_address(const net::executor& ex, const destination& to, const net::ip::address& a, bool failed) {
  if (!to.health || a.is_unspecified()) return;
  if (!failed) return to.health->address_answered(a);
  to.health->address_failed(a, resolver_of(ex).address_count(to.host));
}

namespace {

/** A new connection for an attempt. Out of descriptors while idle connections to other hosts
    hold some, one of those (the least recently used) gives its descriptor to this call
    instead of the call being refused. The addresses that failed to connect are reported. */
net::awaitable<open_result> fresh_connection(pool& p, const destination& to, const net::executor& ex,
                                             const std::vector<net::ip::address>* avoid, clock::time_point deadline) {
  auto c = co_await open_connection(to.host, to.port, to.tls, deadline, {}, avoid);
  while (!c.conn && c.error == http::error_type::overloaded && p.close_oldest())
    c = co_await open_connection(to.host, to.port, to.tls, deadline, {}, avoid);
  for (auto const& a : c.failed) report_address(ex, to, a, true);
  co_return c;
}

/** A request whose body is at hand as one gather write: its serialized `head`, then the body
    as it is framed (whole, or as one chunk and the last), `size_line` holding a chunk's size. */
std::array<net::const_buffer, 4> whole_request(const std::string& head, const http::request_message<bhttp::buffer_body>& req,
                                               std::string_view body, std::array<char, 20>& size_line) {
  std::array<net::const_buffer, 4> wire{net::buffer(head)};
  if (!req.chunked()) {
    wire[1] = net::buffer(body.data(), body.size());
  } else if (!body.empty()) {
    wire[1] = net::buffer(http::chunk_size_line(size_line, body.size()));
    wire[2] = net::buffer(body.data(), body.size());
    wire[3] = net::buffer("\r\n0\r\n\r\n", 7);
  } else {
    wire[1] = net::buffer(http::last_chunk);
  }
  return wire;
}

/** The exchange both run_attempt overloads are: a body at hand goes in one write (and again,
    whole, on a fresh connection when a pooled one was dead); `send` streams one through once. */
net::awaitable<attempt_result> exchange_once(pool& p, destination to, outgoing_request r, const request_sender* send,
                                             clock::time_point deadline) {
  auto& req = r.req;
  auto const body = r.body;
  bool const is_head = r.is_head;
  if (to.auth) {
    auto refused = co_await apply_credential(*to.auth, req, deadline);
    if (refused) {
      refused->may_have_reached = false;
      co_return std::move(*refused);
    }
  }
  bool const may_reuse = to.may_reuse && !send;
  auto const ex = co_await net::this_coro::executor;
  std::vector<net::ip::address> shunned;  // no allocation unless an address is ejected
  auto const* avoid = addresses_to_avoid(ex, to, shunned);
  auto out = p.spare_exchange();
  auto& head = out->head_text;  // serialized once, after the credential
  for (int round = 0; round < 2; ++round) {
    out->stream.reset();
    out->response.reset();
    out->buffer.consume(out->buffer.size());
    if (round == 0 && may_reuse) {
      if (auto pooled = avoid ? p.take_avoiding(to.pool_key, *avoid) : p.take(to.pool_key))
        out->stream.emplace(std::move(*pooled));
    }
    bool const reused = out->stream.has_value();
    if (!out->stream) {
      auto c = co_await fresh_connection(p, to, ex, avoid, deadline);
      if (!c.conn) co_return retry::attempt_failure{c.error, c.message, false};
      out->stream.emplace(std::move(*c.conn));
    }
    auto& up = *out->stream;
    if (to.used) *to.used = up.peer();
    // Other 1xx than a 100 the client waits for go on to the client even if the attempt
    // is then retried: they promise nothing about the final answer (an Early Hints of a
    // failed attempt only wasted a preload). A 100 to a request whose body is at hand
    // answers an Expect rebound did not forward.
    interim_route route{to.interim_to, to.pass_100, false, false, to.upgrade};
    if (send) {
      auto failed = co_await (*send)(up, *out, route, deadline);
      if (failed) co_return std::move(*failed);
      if (out->response) co_return std::move(out);  // answered before it took the body
    } else {
      // The body is sent from memory: a retry sends the same bytes again, head and body in
      // one gather write.
      if (head.empty()) http::append_head(head, req.base());
      up.expires_at(deadline);
      auto [wec, wn] = co_await net::async_write(up, whole_request(head, req, body, out->chunk_size_line), use_tuple);
      if (wec) {
        // A cancelled attempt (a hedge that lost, retry/hedge.hpp) is not sent again.
        if (wec == net::error::operation_aborted)
          co_return retry::attempt_failure{http::error_type::connect_reset, "the attempt was cancelled"};
        if (reused && round == 0 && wec != beast::error::timeout) {
          p.check(to.pool_key);  // its siblings are likely closed too
          continue;
        }
        report_address(ex, to, up.peer(), true);
        if (wec == beast::error::timeout)
          co_return retry::attempt_failure{http::error_type::attempt_timeout, "sending the request timed out"};
        co_return retry::attempt_failure{classify_connect_error(wec), "sending the request failed: " + wec.message()};
      }
    }
    auto failed = co_await read_final_head(*out, is_head, deadline, route);
    to.interim_to = route.client;
    if (!failed) {
      if (to.health) report_address(ex, to, up.peer(), retry::fails_address({out->response->get().result_int()}));
      co_return std::move(out);
    }
    bool const nothing_received = out->buffer.size() == 0 && !out->response->got_some();
    auto const cancelled = (co_await net::this_coro::cancellation_state).cancelled() != net::cancellation_type::none;
    if (reused && round == 0 && nothing_received && failed->type != http::error_type::attempt_timeout && !cancelled) {
      p.check(to.pool_key);  // stale: its siblings are likely closed too; go again
      continue;
    }
    if (!cancelled) report_address(ex, to, up.peer(), true);  // a reset or a timeout before the answer
    co_return std::move(*failed);
  }
  co_return retry::attempt_failure{http::error_type::connect_reset, "upstream closed the connection before answering"};
}

}  // namespace

net::awaitable<attempt_result> run_attempt(pool& p, destination to, outgoing_request r, clock::time_point deadline) {
  return exchange_once(p, to, r, nullptr, deadline);
}

net::awaitable<attempt_result> run_attempt(pool& p, destination to, outgoing_request r, const request_sender& send,
                                           clock::time_point deadline) {
  r.body = {};
  return exchange_once(p, to, r, &send, deadline);
}

}  // namespace rebound::upstream
