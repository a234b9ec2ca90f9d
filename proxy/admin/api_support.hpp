#pragma once
/** What the handlers of the async delivery API share (task_api.cpp, dlq_api.cpp,
    policy_api.cpp): answers in SPEC 6's shape, query strings, pages, times, a task's public
    fields. Internal to proxy/admin. */
#include "proxy/wire/head_fields.hpp"
#include "proxy/admin/task_api.hpp"
#include "proxy/observe/json.hpp"
#include "proxy/store/task_store.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace rebound::admin::api {

using response = bhttp::response<bhttp::string_body>;

/// The largest page a listing gives.
constexpr std::size_t max_page = 500;

/// Answers to one request: its version and keep-alive carried over.
class answers {
 public:
  explicit answers(const http::request_message<bhttp::string_body>& req) : req_(req) {}
  response json(bhttp::status s, std::string body) const;
  /// SPEC 6's shape: {"error": {"type", "message"}}.
  response error(bhttp::status s, std::string_view type, std::string_view message) const;
  response unavailable(const store::store_error& e) const;

 private:
  const http::request_message<bhttp::string_body>& req_;
};

/// The value of `name` in the query string, undecoded (ids and dependency names need no escaping).
std::string query_value(std::string_view target, std::string_view name);
/// RFC 3339 in UTC (`2026-11-23T21:07:53Z`, fraction optional): the `since`/`until` of a filter.
std::optional<store::wall_clock::time_point> parse_time(std::string_view s);
/// `limit` of a page: 1..500, `fallback` when absent; nullopt when malformed.
std::optional<std::size_t> page_limit(std::string_view text, std::size_t fallback);
/// The fields a listing and a task share; never headers or body, the path without its query.
void task_fields(observe::json_writer& w, const store::retry_task& t);

// The handlers outside task_api.cpp. Arguments by reference: GCC 12 destroys by-value
// arguments of a co_awaited call twice.

/// POST /retry-policies
net::awaitable<response> register_policy(const answers& a, const task_api_context& ctx, const std::string& text);
/// GET /retry-policies/{id}
net::awaitable<response> get_policy(const answers& a, store::policy_registry& store, const std::string& id);
/// GET /dlq
net::awaitable<response> list_dlq(const answers& a, store::task_queue& store, std::string_view target);
/// POST /dlq/{id}/replay
net::awaitable<response> replay(const answers& a, const task_api_context& ctx, const std::string& id);
/// POST /dlq/replay
net::awaitable<response> replay_matching(const answers& a, const task_api_context& ctx, const std::string& text);
/// DELETE /dlq/{id}
net::awaitable<response> delete_dead_letter(const answers& a, const task_api_context& ctx, const std::string& id);

}  // namespace rebound::admin::api
