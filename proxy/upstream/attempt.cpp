#include "proxy/upstream/attempt.hpp"

#include "proxy/auth/credential_source.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/upstream/connect.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace rebound::upstream {

attempt_failure read_failure(const error_code& ec) {
  if (ec == beast::error::timeout) return {http::error_type::attempt_timeout, "no response head within the attempt timeout"};
  if (ec == bhttp::error::end_of_stream || ends_stream(ec) || ec == net::error::connection_reset ||
      ec == bhttp::error::partial_message)
    return {http::error_type::connect_reset, "upstream closed the connection before a complete response head"};
  return {http::error_type::upstream_protocol_error, "invalid response from upstream: " + ec.message()};
}

net::awaitable<std::optional<attempt_failure>> apply_credential(auth::credential_source& source,
                                                                bhttp::request<bhttp::buffer_body>& req,
                                                                clock::time_point deadline) {
  auto cred = co_await source.authorization(deadline);
  if (!cred.authorization)
    co_return attempt_failure{http::error_type::auth_refresh_failed, "no valid credential for the upstream: " + cred.error};
  req.set(bhttp::field::authorization, *cred.authorization);
  co_return std::nullopt;
}

net::awaitable<std::optional<attempt_failure>> run_attempt(pool& p, destination to,
                                                           bhttp::request<bhttp::buffer_body>& req, std::string_view body,
                                                           bool is_head, clock::time_point deadline, exchange& out) {
  if (to.auth) {
    auto refused = co_await apply_credential(*to.auth, req, deadline);
    if (refused) {
      out.stream.reset();
      out.response.reset();
      co_return refused;
    }
  }
  for (int round = 0; round < 2; ++round) {
    out.stream.reset();
    out.response.reset();
    out.buffer.consume(out.buffer.size());
    if (round == 0 && to.may_reuse) {
      if (auto pooled = p.take(to.pool_key)) out.stream.emplace(std::move(*pooled));
    }
    bool const reused = out.stream.has_value();
    if (!out.stream) {
      auto c = co_await open_connection(to.host, to.port, to.tls, deadline);
      if (!c.conn) co_return attempt_failure{c.error, c.message};
      out.stream.emplace(std::move(*c.conn));
    }
    auto& up = *out.stream;
    // The body is sent from memory: a retry sends the same bytes again.
    req.body().data = body.empty() ? nullptr : const_cast<char*>(body.data());
    req.body().size = body.size();
    req.body().more = false;
    bhttp::request_serializer<bhttp::buffer_body> sr{req};
    up.expires_at(deadline);
    auto [wec, wn] = co_await bhttp::async_write(up, sr, use_tuple);
    if (wec) {
      if (reused && round == 0 && wec != beast::error::timeout) continue;
      if (wec == beast::error::timeout) co_return attempt_failure{http::error_type::attempt_timeout, "sending the request timed out"};
      co_return attempt_failure{classify_connect_error(wec), "sending the request failed: " + wec.message()};
    }
    for (;;) {
      out.response.emplace();
      out.response->header_limit(max_response_head);
      out.response->body_limit(boost::none);
      if (is_head) out.response->skip(true);
      up.expires_at(deadline);
      auto [ec, n] = co_await bhttp::async_read_header(up, out.buffer, *out.response, use_tuple);
      if (ec) {
        bool const nothing_received = out.buffer.size() == 0 && !out.response->got_some();
        out.response.reset();
        if (reused && round == 0 && nothing_received && ec != beast::error::timeout) break;  // stale: go again
        co_return read_failure(ec);
      }
      auto const status = out.response->get().result_int();
      if (status == 101) {
        out.response.reset();
        co_return attempt_failure{http::error_type::upstream_protocol_error, "upstream switched protocols unasked"};
      }
      if (status >= 200) co_return std::nullopt;
      // A 100 answers an Expect the client did not send (its body is at hand); other 1xx
      // go on to the client even if the attempt is then retried: they promise nothing
      // about the final answer (an Early Hints of a failed attempt only wasted a preload).
      if (status != 100 && to.interim_to) {
        if (auto wec = co_await http::relay_interim(*to.interim_to, out.response->get().base(), to.client_idle))
          to.interim_to = nullptr;  // the client's trouble shows when the final answer goes out
      }
    }
  }
  co_return attempt_failure{http::error_type::connect_reset, "upstream closed the connection before answering"};
}

}  // namespace rebound::upstream
