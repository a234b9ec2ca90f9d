#include "proxy/upstream/service_call.hpp"

#include "proxy/wire/bounded_parser.hpp"
#include "proxy/upstream/connect.hpp"
#include "proxy/upstream/tls_client.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace rebound::upstream {

namespace bhttp = boost::beast::http;

net::awaitable<service_answer> call_service(const config::service_url& url, tls_client* tls,
                                            http::request_message<bhttp::string_body>& req, std::size_t max_answer,
                                            std::chrono::steady_clock::time_point deadline) {
  service_answer out;
  auto c = co_await open_connection(url.origin.host, url.origin.port, tls, deadline);
  if (!c.conn) {
    out.error = "could not be reached: " + c.message;
    co_return out;
  }
  auto& conn = *c.conn;
  auto const default_port = url.origin.scheme == "https" ? 443 : 80;
  auto const host = url.origin.host.find(':') != std::string::npos ? "[" + url.origin.host + "]" : url.origin.host;
  req.target(url.target);
  req.version(11);
  req.set(bhttp::field::host, url.origin.port == default_port ? host : host + ":" + std::to_string(url.origin.port));
  req.set(bhttp::field::connection, "close");
  req.prepare_payload();
  conn.expires_at(deadline);
  auto [wec, wn] = co_await bhttp::async_write(conn, req, use_tuple);
  if (wec) {
    out.error = "sending the request failed: " + wec.message();
    co_return out;
  }
  beast::flat_buffer buffer(128 * 1024);  // bounds chunk-size lines and trailers
  http::bounded_parser<false, bhttp::string_body> parser;
  parser.body_limit(max_answer);
  auto [rec, rn] = co_await bhttp::async_read(conn, buffer, parser, use_tuple);
  if (rec && !(ends_stream(rec) && parser.is_done())) {
    out.error = rec == beast::error::timeout ? std::string("no answer in time") : "reading the answer failed: " + rec.message();
    co_return out;
  }
  out.status = parser.get().result_int();
  out.body = std::move(parser.get().body());
  co_return out;
}

}  // namespace rebound::upstream
