#include "proxy/app/trace_export.hpp"

#include "proxy/upstream/service_call.hpp"
#include "proxy/upstream/tls_client.hpp"

#include <boost/beast/http/string_body.hpp>

#include <memory>

namespace rebound::app {
namespace {

namespace bhttp = boost::beast::http;

/// What every export of one process shares.
struct collector {
  config::service_url url;
  std::unique_ptr<upstream::tls_client> tls;  ///< for an https:// endpoint
  std::vector<std::pair<std::string, std::string>> headers;
};

/// One batch to the collector. `body` lives in the tracer's frame until this ends.
net::awaitable<bool> export_batch(std::shared_ptr<const collector> c, const std::string& body,
                                  std::chrono::steady_clock::time_point deadline) {
  http::request_message<bhttp::string_body> req{bhttp::verb::post, "/", 11};
  req.set(bhttp::field::content_type, "application/json");
  req.set(bhttp::field::user_agent, "rebound/" REBOUND_VERSION);
  for (auto const& [name, value] : c->headers) req.set(name, value);
  req.body() = body;
  auto op = upstream::call_service(c->url, c->tls.get(), req, 64 * 1024, deadline);  // made, then awaited
  auto const answer = co_await std::move(op);
  co_return answer.error.empty() && answer.status / 100 == 2;
}

}  // namespace

observe::trace_settings trace_settings_for(const config::config& cfg) {
  auto const& t = cfg.tracing;
  observe::trace_settings ts;
  ts.sample_ratio = t.sample_ratio;
  ts.follow_caller = t.follow_caller;
  ts.max_queue = t.max_queue;
  ts.batch = std::min<std::size_t>(ts.batch, t.max_queue);
  ts.timeout = t.timeout;
  for (auto const& [k, v] : t.resource) ts.resource.push_back({k, v});
  if (!t.endpoint) return ts;
  auto c = std::make_shared<collector>();
  c->url = *t.endpoint;
  c->headers = t.headers;
  if (c->url.origin.scheme == "https")
    c->tls = std::make_unique<upstream::tls_client>(config::tls_settings{t.ca_file, {}, {}, {}}, c->url.origin.host);
  ts.send = [c = std::shared_ptr<const collector>(std::move(c))](const std::string& body,
                                                                  std::chrono::steady_clock::time_point deadline) {
    return export_batch(c, body, deadline);
  };
  return ts;
}

}  // namespace rebound::app
