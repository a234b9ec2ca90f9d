#include "proxy/http/forward.hpp"

#include "proxy/http/hop_by_hop.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/idempotency/key.hpp"
#include "proxy/retry/loop.hpp"
#include "proxy/upstream/connect.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <optional>

namespace rebound::http {
namespace {

using namespace boost::asio::experimental::awaitable_operators;
using clock = std::chrono::steady_clock;
using response_parser = bhttp::response_parser<bhttp::buffer_body>;

/// How long an upstream may stay silent after an `Expect: 100-continue` head before the
/// client is told to send its body anyway (curl waits 1 s itself).
constexpr std::chrono::milliseconds expect_wait{1000};
constexpr std::uint32_t max_response_head = 64 * 1024;

std::string pool_key(const request_target& t) {
  return t.scheme + "://" + t.connect_host + ":" + std::to_string(t.port);
}

/// The path without its query, the only part of a target that may be logged.
std::string_view loggable_path(std::string_view origin_form) {
  return origin_form.substr(0, origin_form.find('?'));
}

/// The request head as the upstream hop must see it.
void prepare_upstream_request(bhttp::request<bhttp::buffer_body>& req, const bhttp::request_parser<bhttp::buffer_body>& p,
                              const request_target& t) {
  strip_hop_by_hop(req.base());
  req.target(t.origin_form);
  req.set(bhttp::field::host, t.authority);
  req.version(11);
  if (p.chunked()) req.chunked(true);
  else if (auto cl = p.content_length()) req.content_length(*cl);  // collapses a valid "42, 42"
  add_via(req.base());
}

/// The response head as the client hop must see it; returns whether the client
/// connection can stay open after this response.
bool prepare_client_response(bhttp::response<bhttp::buffer_body>& res, const response_parser& p, bool is_head,
                             unsigned client_version, bool client_keep_alive, unsigned attempts) {
  strip_hop_by_hop(res.base());
  add_via(res.base());
  auto const status = res.result_int();
  bool const has_body = !(is_head || status / 100 == 1 || status == 204 || status == 304);
  if (has_body) {
    if (auto cl = p.content_length(); cl && !p.chunked()) {
      res.content_length(*cl);
    } else if (client_version >= 11) {
      res.chunked(true);  // chunked or close-delimited upstream: re-framed so the client can keep the connection
    } else {
      client_keep_alive = false;  // an HTTP/1.0 client learns the end from the close
    }
  }
  res.set("Rebound-Attempts", std::to_string(attempts));
  res.version(11);
  res.keep_alive(client_keep_alive);
  if (client_keep_alive && client_version < 11) res.set(bhttp::field::connection, "keep-alive");
  return client_keep_alive;
}

/// Everything an attempt's failure needs to produce the answer and the log line.
struct failure {
  unsigned status;
  error_type type;
  std::string message;
};

failure upstream_read_failure(const error_code& ec) {
  if (ec == beast::error::timeout) return {504, error_type::attempt_timeout, "no response head within attempt_timeout"};
  if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
      ec == bhttp::error::partial_message)
    return {502, error_type::connect_reset, "upstream closed the connection before a complete response head"};
  return {502, error_type::upstream_protocol_error, "invalid response from upstream: " + ec.message()};
}

/** Reads response heads until a final one, passing interim 1xx answers to an HTTP/1.1
    client (a 100 only if the client asked for it and has not had one). */
net::awaitable<error_code> read_final_head(beast::tcp_stream& up, beast::flat_buffer& ubuf, std::optional<response_parser>& rp,
                                           beast::tcp_stream& client, bool is_head, unsigned client_version,
                                           bool& continue_sent, bool want_continue, bool return_on_continue,
                                           clock::time_point deadline, std::chrono::milliseconds idle) {
  for (;;) {
    rp.emplace();
    rp->header_limit(max_response_head);
    rp->body_limit(boost::none);
    if (is_head) rp->skip(true);
    up.expires_at(deadline);
    auto [ec, n] = co_await bhttp::async_read_header(up, ubuf, *rp, use_tuple);
    if (ec) co_return ec;
    auto const status = rp->get().result_int();
    if (status >= 200) co_return error_code{};
    if (status == 101) co_return bhttp::error::bad_status;  // rebound never forwards Upgrade
    if (client_version < 11 || (status == 100 && (!want_continue || continue_sent))) continue;
    bhttp::response<bhttp::empty_body> interim;
    interim.version(11);
    interim.result(status);  // by number: Beast 1.81's status enum has no 103
    for (auto const& f : rp->get()) interim.insert(f.name_string(), f.value());
    strip_hop_by_hop(interim.base());
    client.expires_after(idle);
    auto [wec, wn] = co_await bhttp::async_write(client, interim, use_tuple);
    if (wec) co_return wec;
    if (status == 100) {
      continue_sent = true;
      if (return_on_continue) co_return error_code{};
    }
  }
}

}  // namespace

net::awaitable<bool> send_error(beast::tcp_stream& client, const error_reply& e, bool keep_alive,
                                std::chrono::milliseconds idle) {
  auto res = make_error_response(e, keep_alive);
  client.expires_after(idle);
  auto [ec, n] = co_await bhttp::async_write(client, res, use_tuple);
  co_return !ec;
}

namespace {

/** Streams a request whose body is not kept (too large, chunked, or not retryable): one
    attempt, the body relayed as it arrives, Expect: 100-continue passed through. */
net::awaitable<bool> forward_streaming(const session_context& ctx, beast::tcp_stream& client, beast::flat_buffer& buffer,
                             bhttp::request_parser<bhttp::buffer_body>& parser, const request_target& target,
                             std::string_view dependency, const config::policy& policy) {
  auto& req = parser.get();
  auto const idle = ctx.cfg->limits.idle_timeout;
  bool const client_wants_keep_alive = req.keep_alive();
  unsigned const client_version = req.version();
  bool const is_head = req.method() == bhttp::verb::head;
  // Views, not copies: they are only read when an error is logged.
  std::string_view const method = req.method() != bhttp::verb::unknown ? bhttp::to_string(req.method()) : "extension";
  std::string_view const path = loggable_path(target.origin_form);

  auto fail = [&](const failure& f) {
    ctx.log->warn("upstream_error", {{"dependency", dependency}, {"method", method}, {"path", path},
                                     {"error_type", to_string(f.type)}, {"status", f.status}, {"message", f.message}});
    return error_reply{f.status, f.type, f.message, std::string(dependency), 1};
  };

  // Expect: 100-continue is end-to-end: forwarded, and answered per RFC 9110 section 10.1.1.
  bool want_continue = false;
  if (auto it = req.find(bhttp::field::expect); it != req.end()) {
    if (client_version >= 11 && !beast::iequals(it->value(), "100-continue")) {
      error_reply const reply{417, error_type::bad_request, "only Expect: 100-continue is supported", {}, 0};
      co_await send_error(client, reply, false, idle);
      co_return false;
    }
    want_continue = client_version >= 11 && !parser.is_done();
    if (!want_continue) req.erase(bhttp::field::expect);
  }
  prepare_upstream_request(req, parser, target);

  auto const key = pool_key(target);
  auto deadline = clock::now() + policy.attempt_timeout;
  // A pooled connection may have been closed by the upstream just as it was reused. A
  // request without a body can then go again on a fresh connection: nothing of it was
  // processed, and the client has nothing more to send.
  for (int round = 0; round < 2; ++round) {
    std::optional<beast::tcp_stream> up;
    if (round == 0) {
      if (auto pooled = ctx.pool->take(key)) up.emplace(std::move(*pooled));
    }
    bool const reused = up.has_value();
    if (!up) {
      auto c = co_await upstream::connect_to(target.connect_host, target.port, deadline);
      if (!c.stream) {
        bool const keep = client_wants_keep_alive && parser.is_done() && !ctx.sessions->draining();
        error_reply const reply = fail({default_status(c.error), c.error, c.message});
        co_await send_error(client, reply, keep, idle);
        co_return keep;
      }
      up.emplace(std::move(*c.stream));
    }
    beast::flat_buffer ubuf;
    std::optional<response_parser> rp;
    bhttp::request_serializer<bhttp::buffer_body> sr{req};
    bool continue_sent = false;
    bool body_skipped = false;  // the upstream answered before wanting the body

    if (parser.is_done()) {
      req.body().data = nullptr;
      req.body().size = 0;
      req.body().more = false;
      up->expires_at(deadline);
      auto [ec, n] = co_await bhttp::async_write(*up, sr, use_tuple);
      if (ec) {
        if (reused && round == 0) continue;
        error_reply const reply = fail({502, upstream::classify_connect_error(ec), "sending the request failed: " + ec.message()});
        co_await send_error(client, reply, false, idle);
        co_return false;
      }
    } else {
      if (want_continue) {
        up->expires_at(deadline);
        auto [ec, n] = co_await bhttp::async_write_header(*up, sr, use_tuple);
        if (ec) {
          error_reply const reply = fail({502, upstream::classify_connect_error(ec), "sending the request failed: " + ec.message()});
          co_await send_error(client, reply, false, idle);
          co_return false;
        }
        net::steady_timer timer(co_await net::this_coro::executor);
        timer.expires_at(std::min(clock::now() + expect_wait, deadline));
        auto readable = up->socket().async_wait(tcp::socket::wait_read, use_tuple);
        auto expire = timer.async_wait(use_tuple);
        auto spoke = co_await (std::move(readable) || std::move(expire));
        if (spoke.index() == 0) {
          auto hec = co_await read_final_head(*up, ubuf, rp, client, is_head, client_version, continue_sent, true, true,
                                              deadline, idle);
          if (hec) {
            error_reply const reply = fail(upstream_read_failure(hec));
            co_await send_error(client, reply, false, idle);
            co_return false;
          }
          auto const status = rp->get().result_int();
          // A 100 read here was already relayed by read_final_head; the final status it
          // read instead means the upstream refused the body.
          if (continue_sent) rp.reset();
          else body_skipped = status >= 200;
        }
        if (!continue_sent && !body_skipped) {
          static constexpr std::string_view continue_line = "HTTP/1.1 100 Continue\r\n\r\n";
          client.expires_after(idle);
          auto [cec, cn] = co_await net::async_write(client, net::buffer(continue_line), use_tuple);
          if (cec) co_return false;
          continue_sent = true;
        }
      }
      if (!body_skipped) {
        auto const upload_start = clock::now();
        auto rr = co_await relay_request_body(client, buffer, parser, *up, sr, idle);
        // The attempt timeout measures the upstream, not how slowly the client uploads.
        deadline += clock::now() - upload_start;
        if (rr.read_error) {
          std::optional<error_reply> reply;
          if (rr.read_error == bhttp::error::body_limit)
            reply = error_reply{413, error_type::bad_request, "request body too large", std::string(dependency), 0};
          else if (rr.read_error.category() == bhttp::make_error_code(bhttp::error::bad_chunk).category() &&
                   rr.read_error != bhttp::error::partial_message)
            reply = error_reply{400, error_type::bad_request, "malformed request body: " + rr.read_error.message(),
                                std::string(dependency), 0};
          if (reply) co_await send_error(client, *reply, false, idle);
          co_return false;
        }
        if (rr.write_error) {
          error_reply const reply = fail({502, upstream::classify_connect_error(rr.write_error),
                                            "sending the request body failed: " + rr.write_error.message()});
          co_await send_error(client, reply, false, idle);
          co_return false;
        }
      }
    }

    if (!rp) {
      auto hec = co_await read_final_head(*up, ubuf, rp, client, is_head, client_version, continue_sent, want_continue,
                                          false, deadline, idle);
      if (hec) {
        bool const nothing_received = ubuf.size() == 0 && !rp->got_some();
        if (reused && round == 0 && nothing_received && hec != beast::error::timeout && parser.is_done()) continue;
        error_reply const reply = fail(upstream_read_failure(hec));
        co_await send_error(client, reply, false, idle);
        co_return false;
      }
    }

    auto& res = rp->get();
    bool const upstream_keep_alive = rp->keep_alive();
    bool const client_keep_alive = prepare_client_response(
        res, *rp, is_head, client_version, client_wants_keep_alive && parser.is_done() && !ctx.sessions->draining(), 1);
    bhttp::response_serializer<bhttp::buffer_body> rsr{res};
    auto rr = co_await relay_response_body(*up, ubuf, *rp, client, rsr, idle);
    if (!rr.ok()) {
      if (rr.read_error)
        ctx.log->warn("upstream_error", {{"dependency", dependency}, {"method", method}, {"path", path},
                                         {"error_type", "upstream_protocol_error"},
                                         {"message", "response body cut short: " + rr.read_error.message()}});
      co_return false;  // the client saw a partial response: only a close tells it so
    }
    if (upstream_keep_alive && !body_skipped && ubuf.size() == 0) {
      up->expires_never();
      ctx.pool->put(key, std::move(*up));
    }
    co_return client_keep_alive;
  }
  co_return false;  // unreachable: the second round never continues
}


}  // namespace

namespace {

/// The first of X-Request-ID and X-Correlation-ID the client sent (empty when none).
std::string_view correlation_id(const bhttp::request<bhttp::buffer_body>& req) {
  if (auto it = req.find("X-Request-ID"); it != req.end()) return it->value();
  if (auto it = req.find("X-Correlation-ID"); it != req.end()) return it->value();
  return {};
}

/** Reads the whole request body into `out` (its Content-Length is within max_retry_body),
    so every attempt can send it again. Returns the answer for a client that failed. */
net::awaitable<std::optional<error_reply>> read_whole_body(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                                           bhttp::request_parser<bhttp::buffer_body>& parser,
                                                           std::string& out, std::chrono::milliseconds idle) {
  if (auto cl = parser.content_length()) out.reserve(static_cast<std::size_t>(*cl));
  std::array<char, 16 * 1024> chunk;
  auto& body = parser.get().body();
  while (!parser.is_done()) {
    body.data = chunk.data();
    body.size = chunk.size();
    client.expires_after(idle);
    auto [ec, n] = co_await bhttp::async_read_some(client, buffer, parser, use_tuple);
    if (ec && ec != bhttp::error::need_buffer) {
      if (ec == bhttp::error::body_limit) co_return error_reply{413, error_type::bad_request, "request body too large", {}, 0};
      if (ec.category() == bhttp::make_error_code(bhttp::error::bad_chunk).category() && ec != bhttp::error::partial_message)
        co_return error_reply{400, error_type::bad_request, "malformed request body: " + ec.message(), {}, 0};
      co_return error_reply{0, error_type::bad_request, "client went away", {}, 0};  // status 0: nobody to answer
    }
    out.append(chunk.data(), chunk.size() - body.size);
  }
  co_return std::nullopt;
}

/** A request whose body is none or kept in memory: attempts run in the retry loop and
    the last response is streamed to the client. */
net::awaitable<bool> forward_buffered(const session_context& ctx, session_guard& guard, beast::tcp_stream& client,
                                      beast::flat_buffer& buffer, bhttp::request_parser<bhttp::buffer_body>& parser,
                                      const request_target& target, retry::request_facts facts,
                                      const config::policy& policy) {
  auto& req = parser.get();
  auto const idle = ctx.cfg->limits.idle_timeout;
  bool const client_wants_keep_alive = req.keep_alive();
  unsigned const client_version = req.version();
  bool const is_head = req.method() == bhttp::verb::head;

  std::string body;
  if (!parser.is_done()) {
    auto problem = co_await read_whole_body(client, buffer, parser, body, idle);
    if (problem) {
      if (problem->status != 0) {
        problem->dependency = std::string(facts.dependency);
        co_await send_error(client, *problem, false, idle);
      }
      co_return false;
    }
  }
  prepare_upstream_request(req, parser, target);

  auto const key = pool_key(target);
  upstream::exchange ex;
  auto const result = co_await retry::run_retry_loop(
      policy, facts, *ctx.pool, upstream::destination{key, target.connect_host, target.port}, req, body, is_head,
      *ctx.rng, *ctx.log, retry::wait_hooks{ctx.sessions->draining_flag(), guard.backoff_slot()}, ex);

  bool const keep = client_wants_keep_alive && !ctx.sessions->draining();
  if (result.failure) {
    auto const& f = *result.failure;
    ctx.log->warn("upstream_error", {{"dependency", facts.dependency}, {"method", facts.method}, {"path", facts.path},
                                     {"error_type", to_string(f.type)}, {"attempts", result.attempts},
                                     {"message", f.message}});
    error_reply const reply{default_status(f.type), f.type, f.message, std::string(facts.dependency), result.attempts};
    co_await send_error(client, reply, keep, idle);
    co_return keep;
  }
  auto& rp = *ex.response;
  auto& res = rp.get();
  bool const upstream_keep_alive = rp.keep_alive();
  bool const client_keep_alive = prepare_client_response(res, rp, is_head, client_version, keep, result.attempts);
  bhttp::response_serializer<bhttp::buffer_body> rsr{res};
  auto rr = co_await relay_response_body(*ex.stream, ex.buffer, rp, client, rsr, idle);
  if (!rr.ok()) {
    if (rr.read_error)
      ctx.log->warn("upstream_error", {{"dependency", facts.dependency}, {"method", facts.method}, {"path", facts.path},
                                       {"error_type", "upstream_protocol_error"},
                                       {"message", "response body cut short: " + rr.read_error.message()}});
    co_return false;
  }
  if (upstream_keep_alive && ex.buffer.size() == 0) {
    ex.stream->expires_never();
    ctx.pool->put(key, std::move(*ex.stream));
  }
  co_return client_keep_alive;
}

}  // namespace

net::awaitable<bool> forward(const session_context& ctx, session_guard& guard, beast::tcp_stream& client,
                             beast::flat_buffer& buffer, bhttp::request_parser<bhttp::buffer_body>& parser,
                             const request_target& target, std::string_view dependency, const config::policy& policy) {
  auto& req = parser.get();
  auto const idle = ctx.cfg->limits.idle_timeout;
  if (auto it = req.find(bhttp::field::expect); it != req.end() && req.version() >= 11 &&
                                                !beast::iequals(it->value(), "100-continue")) {
    error_reply const reply{417, error_type::bad_request, "only Expect: 100-continue is supported", {}, 0};
    co_await send_error(client, reply, false, idle);
    co_return false;
  }

  retry::request_facts facts;
  facts.dependency = dependency;
  facts.method = req.method() != bhttp::verb::unknown ? bhttp::to_string(req.method()) : "extension";
  facts.path = loggable_path(target.origin_form);
  facts.correlation_id = correlation_id(req);

  // whether this request may be sent more than once.
  auto const& key_header = policy.idempotency.header;
  std::string injected_key;
  if (auto it = req.find(key_header); it != req.end()) {
    if (auto problem = idempotency::key_problem(it->value())) {
      error_reply const reply{400, error_type::bad_request, *problem, std::string(dependency), 0};
      co_await send_error(client, reply, parser.is_done() && req.keep_alive(), idle);
      co_return parser.is_done() && req.keep_alive();
    }
    facts.idempotency_key = it->value();
  }
  if (idempotency::retry_safe_method(req.method())) {
    facts.may_retry = true;
  } else if (idempotency::needs_key(req.method())) {
    if (!facts.idempotency_key.empty()) {
      facts.may_retry = true;
    } else if (policy.idempotency.inject) {
      if (auto k = idempotency::new_key()) {
        injected_key = std::move(*k);
        req.set(key_header, injected_key);
        facts.idempotency_key = injected_key;
        facts.may_retry = true;
      } else {
        facts.why_not = "no idempotency key could be generated";
      }
    } else {
      facts.why_not = "POST/PATCH without an idempotency key, and idempotency.inject is false (R-6)";
    }
  } else {
    facts.why_not = "the method is not idempotent (R-6)";
  }

  // A body can be sent again only if it is kept; a chunked one or one over max_retry_body
  // streams through once.
  bool const has_body = !parser.is_done();
  auto const cl = parser.content_length();
  // With Expect: 100-continue the head must go upstream before the body is read (RFC 9110
  // 10.1.1), so such a body streams through once too.
  bool const expects_continue = has_body && req.version() >= 11 && req.count(bhttp::field::expect) > 0;
  bool const keepable = !has_body || (!parser.chunked() && !expects_continue && cl && *cl <= policy.max_retry_body);
  if (keepable && (facts.may_retry || !has_body))
    co_return co_await forward_buffered(ctx, guard, client, buffer, parser, target, facts, policy);
  if (facts.may_retry && policy.max_retries > 0)
    ctx.log->info("retry_disabled",
                  {{"correlation_id", facts.correlation_id}, {"dependency", dependency}, {"method", facts.method},
                   {"path", facts.path},
                   {"reason", parser.chunked()      ? "chunked body: not kept for a retry"
                              : expects_continue    ? "Expect: 100-continue: the body streams through once"
                                                    : "body larger than max_retry_body: sent once"}});
  co_return co_await forward_streaming(ctx, client, buffer, parser, target, dependency, policy);
}

}  // namespace rebound::http
