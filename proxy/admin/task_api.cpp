#include "proxy/admin/task_api.hpp"

#include "proxy/observe/json.hpp"
#include "proxy/store/task_store.hpp"

#include <boost/beast/core/string.hpp>

#include <charconv>
#include <fstream>
#include <iterator>
#include <optional>

namespace rebound::admin {
namespace {

constexpr std::string_view tasks_prefix = "/retry-tasks/";
constexpr std::string_view dlq_path = "/dlq";
constexpr std::size_t max_page = 500;

using response = bhttp::response<bhttp::string_body>;

using observe::iso8601;

/// The value of `name` in the query string, undecoded (ids and dependency names need no escaping).
std::string query_value(std::string_view target, std::string_view name) {
  auto const q = target.find('?');
  if (q == std::string_view::npos) return {};
  auto rest = target.substr(q + 1);
  while (!rest.empty()) {
    auto const amp = rest.find('&');
    auto const pair = rest.substr(0, amp);
    if (auto const eq = pair.find('='); eq != std::string_view::npos && pair.substr(0, eq) == name)
      return std::string(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return {};
}

class answers {
 public:
  explicit answers(const bhttp::request<bhttp::string_body>& req) : req_(req) {}

  response json(bhttp::status s, std::string body) const {
    response res{s, req_.version()};
    res.set(bhttp::field::content_type, "application/json");
    res.set(bhttp::field::cache_control, "no-store");
    res.body() = std::move(body);
    res.keep_alive(req_.keep_alive());
    res.prepare_payload();
    return res;
  }
  response error(bhttp::status s, std::string_view type, std::string_view message) const {
    std::string body = "{\"error\":{\"type\":";
    observe::append_json_string(body, type);
    body += ",\"message\":";
    observe::append_json_string(body, message);
    body += "}}\n";
    return json(s, std::move(body));
  }
  response unavailable(const store::store_error& e) const {
    return error(bhttp::status::service_unavailable, "store_unavailable", e.message);
  }

 private:
  const bhttp::request<bhttp::string_body>& req_;
};

/// The fields a listing and a task share; never headers or body, the path without its query.
void task_fields(std::string& body, const store::retry_task& t) {
  body += "\"id\":";
  observe::append_json_string(body, t.id);
  body += ",\"status\":\"" + std::string(store::to_string(t.status)) + "\",\"dependency\":";
  observe::append_json_string(body, t.dependency);
  body += ",\"method\":";
  observe::append_json_string(body, t.method);
  auto const scheme_end = t.target.find("://");
  auto const path_start = scheme_end == std::string::npos ? 0 : t.target.find('/', scheme_end + 3);
  auto const path = path_start == std::string::npos ? std::string("/") : t.target.substr(path_start);
  body += ",\"path\":";
  observe::append_json_string(body, path.substr(0, path.find('?')));
  body += ",\"idempotency_key\":";
  observe::append_json_string(body, t.idempotency_key);
  body += ",\"attempts\":" + std::to_string(t.attempts) + ",\"created_at\":\"" + iso8601(t.created_at) + "\"";
  if (t.status == store::task_status::pending || t.status == store::task_status::in_flight)
    body += ",\"next_attempt_at\":\"" + iso8601(t.next_attempt_at) + "\"";
}

// Arguments by reference: GCC 12 destroys by-value arguments of a co_awaited call twice.

/// GET /retry-tasks/{id}: the task and each attempt made.
net::awaitable<response> get_task(const answers& a, store::task_store& store, const std::string& id) {
  auto [e, task] = co_await store::async_get(store, id, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!task) co_return a.error(bhttp::status::not_found, "not_found", "no such task");
  auto [ae, attempts] = co_await store::async_attempts(store, id, 0, max_page, use_tuple);
  if (ae) co_return a.unavailable(*ae);
  std::string body = "{";
  task_fields(body, *task);
  body += ",\"attempt_log\":[";
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    auto const& at = attempts[i];
    if (i) body += ',';
    body += "{\"number\":" + std::to_string(at.number) + ",\"at\":\"" + iso8601(at.at) +
            "\",\"status\":" + std::to_string(at.status) + ",\"error_type\":";
    observe::append_json_string(body, at.error_type);
    body += ",\"duration_ms\":" + std::to_string(at.duration.count() / 1000) + "}";
  }
  body += "]}\n";
  co_return a.json(bhttp::status::ok, std::move(body));
}

/// DELETE /retry-tasks/{id}: cancels a task still waiting; one in flight or ended is a conflict.
net::awaitable<response> cancel_task(const answers& a, store::task_store& store, const std::string& id) {
  auto [e, cancelled] = co_await store::async_cancel(store, id, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (cancelled) co_return a.json(bhttp::status::ok, "{\"id\":\"" + id + "\",\"status\":\"CANCELLED\"}\n");
  auto [ge, task] = co_await store::async_get(store, id, use_tuple);
  if (!task) co_return a.error(bhttp::status::not_found, "not_found", "no such task");
  co_return a.error(bhttp::status::conflict, "not_pending",
                    "only a PENDING task can be cancelled; this one is " + std::string(store::to_string(task->status)));
}

/// GET /dlq[?dependency=NAME][&after=ID][&limit=N]: dead letters by id, a page at a time.
net::awaitable<response> list_dlq(const answers& a, store::task_store& store, std::string_view target) {
  std::size_t limit = 100;
  if (auto const l = query_value(target, "limit"); !l.empty()) {
    auto [p, ec] = std::from_chars(l.data(), l.data() + l.size(), limit);
    if (ec != std::errc() || p != l.data() + l.size() || limit == 0 || limit > max_page)
      co_return a.error(bhttp::status::bad_request, "bad_request", "limit must be 1 to 500");
  }
  // Named, not temporaries in the co_await expression: GCC 12 frees such temporaries twice.
  store::task_filter filter;
  filter.dependency = query_value(target, "dependency");
  filter.after = query_value(target, "after");
  filter.limit = limit;
  auto [e, tasks] = co_await store::async_list(store, filter, use_tuple);
  if (e) co_return a.unavailable(*e);
  std::string body = "{\"items\":[";
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (i) body += ',';
    body += '{';
    task_fields(body, tasks[i]);
    body += '}';
  }
  body += "],\"next\":";
  if (tasks.size() == limit) observe::append_json_string(body, tasks.back().id);
  else body += "null";
  body += "}\n";
  co_return a.json(bhttp::status::ok, std::move(body));
}

/// POST /dlq/{id}/replay: the dead letter is delivered again, with its key, in a fresh window.
net::awaitable<response> replay(const answers& a, store::task_store& store, const std::string& id) {
  auto [e, replayed] = co_await store::async_replay(store, id, store::wall_clock::now(), use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!replayed) co_return a.error(bhttp::status::not_found, "not_found", "no dead letter with this id");
  co_return a.json(bhttp::status::accepted, "{\"id\":\"" + id + "\",\"status\":\"PENDING\"}\n");
}

/// The token file's content without surrounding whitespace; nullopt when unreadable or empty.
std::optional<std::string> read_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto const first = token.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return std::nullopt;
  token.erase(token.find_last_not_of(" \t\r\n") + 1);
  token.erase(0, first);
  return token;
}

/// In time independent of where the two differ: the token is a secret.
bool bearer_matches(const bhttp::request<bhttp::string_body>& req, const std::string& token) {
  auto const it = req.find(bhttp::field::authorization);
  if (it == req.end()) return false;
  std::string_view v = it->value();
  if (v.size() < 7 || !beast::iequals(v.substr(0, 7), "Bearer ")) return false;
  v.remove_prefix(7);
  if (v.size() != token.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < v.size(); ++i) diff |= static_cast<unsigned char>(v[i] ^ token[i]);
  return diff == 0;
}

}  // namespace

bool is_task_api(const bhttp::request<bhttp::string_body>& req) {
  auto const t = req.target();
  return t.starts_with(tasks_prefix) || t == dlq_path || t.starts_with("/dlq?") || t.starts_with("/dlq/");
}

net::awaitable<response> task_api_answer(const bhttp::request<bhttp::string_body>& req, store::task_store& store,
                                         const std::string& token_file) {
  answers const a(req);
  std::string_view const target = req.target();
  std::string_view const path = target.substr(0, target.find('?'));
  auto const method = req.method();
  bool const read = method == bhttp::verb::get || method == bhttp::verb::head;
  if (!read && !token_file.empty()) {
    auto const token = read_token(token_file);
    if (!token) co_return a.error(bhttp::status::service_unavailable, "unavailable", "admin.token_file cannot be read");
    if (!bearer_matches(req, *token)) {
      auto res = a.error(bhttp::status::unauthorized, "unauthorized", "writes need Authorization: Bearer <admin token>");
      res.set(bhttp::field::www_authenticate, "Bearer realm=\"rebound-admin\"");
      co_return res;
    }
  }
  if (path.starts_with(tasks_prefix)) {
    std::string id(path.substr(tasks_prefix.size()));
    if (id.empty() || id.find('/') != std::string::npos)
      co_return a.error(bhttp::status::not_found, "not_found", "no such endpoint");
    if (read) co_return co_await get_task(a, store, id);
    if (method == bhttp::verb::delete_) co_return co_await cancel_task(a, store, id);
    co_return a.error(bhttp::status::method_not_allowed, "bad_request", "GET or DELETE");
  }
  if (path == dlq_path) {
    if (read) co_return co_await list_dlq(a, store, target);
    co_return a.error(bhttp::status::method_not_allowed, "bad_request", "GET");
  }
  constexpr std::string_view replay_suffix = "/replay";
  if (path.starts_with("/dlq/") && path.ends_with(replay_suffix) && path.size() > 5 + replay_suffix.size()) {
    std::string id(path.substr(5, path.size() - 5 - replay_suffix.size()));
    if (method == bhttp::verb::post) co_return co_await replay(a, store, id);
    co_return a.error(bhttp::status::method_not_allowed, "bad_request", "POST");
  }
  co_return a.error(bhttp::status::not_found, "not_found", "no such endpoint");
}

}  // namespace rebound::admin
