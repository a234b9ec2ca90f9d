#include "proxy/admin/task_api.hpp"

#include "config/config.hpp"
#include "config/describe.hpp"
#include "config/load.hpp"
#include "proxy/http/dependency_route.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/http/request_target.hpp"
#include "proxy/idempotency/key.hpp"
#include "proxy/observe/json.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/store/task_store.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <boost/beast/core/string.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <optional>

namespace rebound::admin {
namespace {

constexpr std::string_view tasks_prefix = "/retry-tasks/";
constexpr std::string_view policies_prefix = "/retry-policies/";
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

/// RFC 3339 in UTC (`2026-11-23T21:07:53Z`, fraction optional): the `since`/`until` of a filter.
std::optional<store::wall_clock::time_point> parse_time(std::string_view s) {
  int y, mo, d, h, mi;
  double sec;
  char z = 0;
  std::string const text(s);
  int used = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%lf%c%n", &y, &mo, &d, &h, &mi, &sec, &z, &used) != 7 ||
      (z != 'Z' && z != 'z') || static_cast<std::size_t>(used) != text.size() || mo < 1 || mo > 12 || d < 1 ||
      d > 31 || h > 23 || mi > 59 || sec < 0 || sec >= 61)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  auto const whole = static_cast<int>(sec);
  tm.tm_sec = whole;
  auto const t = ::timegm(&tm);
  return store::wall_clock::from_time_t(t) +
         std::chrono::duration_cast<store::wall_clock::duration>(std::chrono::duration<double>(sec - whole));
}

/// `limit` of a page: 1..500, `fallback` when absent; nullopt when malformed.
std::optional<std::size_t> page_limit(std::string_view text, std::size_t fallback) {
  if (text.empty()) return fallback;
  std::size_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v == 0 || v > max_page) return std::nullopt;
  return v;
}

/// A registered policy's id: what may stand in a URL path unescaped, and never rebound's own `rebound:` ids.
bool valid_policy_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

// Arguments by reference: GCC 12 destroys by-value arguments of a co_awaited call twice.

std::string attempt_json(const store::attempt_log& at) {
  std::string body = "{\"number\":" + std::to_string(at.number) + ",\"at\":\"" + iso8601(at.at) +
                     "\",\"status\":" + std::to_string(at.status) + ",\"error_type\":";
  observe::append_json_string(body, at.error_type);
  body += ",\"duration_ms\":" + std::to_string(at.duration.count() / 1000) + "}";
  return body;
}

/// GET /retry-tasks/{id}: the task and its first attempts (all of them: /attempts pages on).
net::awaitable<response> get_task(const answers& a, store::task_store& store, const std::string& id) {
  auto [e, task] = co_await store::async_get(store, id, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!task) co_return a.error(bhttp::status::not_found, "not_found", "no such task");
  auto [ae, attempts] = co_await store::async_attempts(store, id, 0, max_page, use_tuple);
  if (ae) co_return a.unavailable(*ae);
  std::string body = "{";
  task_fields(body, *task);
  if (!task->policy_id.empty()) {
    body += ",\"policy_id\":";
    observe::append_json_string(body, task->policy_id);
  }
  body += ",\"attempt_log\":[";
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    if (i) body += ',';
    body += attempt_json(attempts[i]);
  }
  body += "]}\n";
  co_return a.json(bhttp::status::ok, std::move(body));
}

/// GET /retry-tasks/{id}/attempts[?after=N][&limit=N]: the attempt log a page at a time.
net::awaitable<response> list_attempts(const answers& a, store::task_store& store, const std::string& id,
                                       std::string_view target) {
  auto const limit = page_limit(query_value(target, "limit"), 100);
  unsigned after = 0;
  auto const after_text = query_value(target, "after");
  if (!after_text.empty()) {
    auto [p, ec] = std::from_chars(after_text.data(), after_text.data() + after_text.size(), after);
    if (ec != std::errc() || p != after_text.data() + after_text.size())
      co_return a.error(bhttp::status::bad_request, "bad_request", "after must be an attempt number");
  }
  if (!limit) co_return a.error(bhttp::status::bad_request, "bad_request", "limit must be 1 to 500");
  auto [e, task] = co_await store::async_get(store, id, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!task) co_return a.error(bhttp::status::not_found, "not_found", "no such task");
  auto [ae, attempts] = co_await store::async_attempts(store, id, after, *limit, use_tuple);
  if (ae) co_return a.unavailable(*ae);
  std::string body = "{\"items\":[";
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    if (i) body += ',';
    body += attempt_json(attempts[i]);
  }
  body += "],\"next\":";
  body += attempts.size() == *limit ? std::to_string(attempts.back().number) : std::string("null");
  body += "}\n";
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

/// The field names a submitted task may not set: framing and hop-by-hop fields, which rebound writes.
bool reserved_field(std::string_view name) {
  for (std::string_view r : {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "te",
                             "trailer", "upgrade", "proxy-connection", "expect"})
    if (beast::iequals(name, r)) return true;
  return false;
}

bool valid_field(std::string_view name, std::string_view value) {
  if (name.empty()) return false;
  for (unsigned char c : name)
    if (c <= 32 || c >= 127 || std::string_view("\"(),/:;<=>?@[\\]{}").find(static_cast<char>(c)) != std::string_view::npos)
      return false;
  return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

/** POST /retry-tasks: a task submitted through the API (seed 001), stored as a handed-over
    call would be and delivered by the same scheduler. JSON: target (an absolute http:// URL),
    method (POST), headers (an object of strings), body (a string), policy_id, idempotency_key
    (else one is made). Answers 201 with the task id once it is committed. */
net::awaitable<response> submit_task(const answers& a, const task_api_context& ctx, const std::string& text) {
  boost::system::error_code jec;
  auto const doc = boost::json::parse(text, jec);
  if (jec || !doc.is_object()) co_return a.error(bhttp::status::bad_request, "bad_request", "the body must be a JSON object");
  auto const& o = doc.as_object();
  auto str = [&](std::string_view k) -> std::optional<std::string> {
    auto const* v = o.if_contains(k);
    if (!v || !v->is_string()) return std::nullopt;
    return std::string(v->as_string());
  };
  for (auto const& kv : o) {
    std::string_view const k = kv.key();
    if (k != "target" && k != "method" && k != "headers" && k != "body" && k != "policy_id" && k != "idempotency_key")
      co_return a.error(bhttp::status::bad_request, "bad_request", "unknown field \"" + std::string(k) + "\"");
    if (k != "headers" && !kv.value().is_string())
      co_return a.error(bhttp::status::bad_request, "bad_request", "\"" + std::string(k) + "\" must be a string");
  }
  auto const url = str("target");
  if (!url || !url->starts_with("http://"))
    co_return a.error(bhttp::status::bad_request, "bad_request",
                      "target must be an absolute http:// URL (an https origin is a dependency's `origin:`)");
  std::string const method = str("method").value_or("POST");
  if (method.empty() || method == "CONNECT" ||
      !std::all_of(method.begin(), method.end(), [](char c) { return std::isupper(static_cast<unsigned char>(c)); }))
    co_return a.error(bhttp::status::bad_request, "bad_request", "method must be an HTTP method other than CONNECT");
  auto parsed = http::parse_request_target(method, *url, "", 0, 11);
  if (!parsed.value) co_return a.error(bhttp::status::bad_request, "bad_request", "target: " + parsed.error);
  auto target = *parsed.value;
  auto const absolute = "http://" + target.authority + target.origin_form;
  auto const route = http::route_request(ctx.cfg, target, method, false);
  if (!route.dependency && ctx.cfg.unknown_hosts == config::unknown_hosts_policy::deny)
    co_return a.error(bhttp::status::forbidden, "unknown_host", "unknown_hosts: deny, and no dependency lists this host");

  store::retry_task t;
  t.body = str("body").value_or("");
  if (t.body.size() > ctx.cfg.async.max_body)
    co_return a.error(bhttp::status::payload_too_large, "bad_request", "body larger than async.max_body");
  auto const& key_header = route.policy->idempotency.header;
  t.headers.emplace_back("Host", target.authority);
  if (auto const* h = o.if_contains("headers")) {
    if (!h->is_object()) co_return a.error(bhttp::status::bad_request, "bad_request", "headers must be an object");
    for (auto const& kv : h->as_object()) {
      if (!kv.value().is_string())
        co_return a.error(bhttp::status::bad_request, "bad_request", "header values must be strings");
      std::string_view const name = kv.key();
      std::string_view const value = kv.value().as_string();
      if (!valid_field(name, value))
        co_return a.error(bhttp::status::bad_request, "bad_request", "invalid header \"" + std::string(name) + "\"");
      if (reserved_field(name) || beast::iequals(name, key_header)) continue;  // rebound writes these
      t.headers.emplace_back(std::string(name), std::string(value));
    }
  }
  auto id = idempotency::new_key();
  auto key = str("idempotency_key");
  if (!key) key = idempotency::new_key();
  if (!id || !key) co_return a.error(bhttp::status::service_unavailable, "store_unavailable", "no id could be generated");
  if (auto problem = idempotency::key_problem(*key))
    co_return a.error(bhttp::status::bad_request, "bad_request", "idempotency_key: " + *problem);
  t.headers.emplace_back(key_header, *key);
  if (auto p = str("policy_id")) {
    auto [pe, policy] = co_await store::async_get_policy(ctx.store, *p, use_tuple);
    if (pe) co_return a.unavailable(*pe);
    if (!policy)
      co_return a.error(bhttp::status::unprocessable_entity, "unknown_policy", "no policy registered as \"" + *p + "\"");
    t.policy_id = *p;
  }
  t.id = *id;
  t.idempotency_key = *key;
  t.dependency = route.name;
  t.method = method;
  t.target = absolute;
  t.created_at = t.next_attempt_at = t.window_start = store::wall_clock::now();
  auto [e, stored] = co_await store::async_accept(ctx.store, t, use_tuple);
  if (e || !stored) co_return a.unavailable(e.value_or(store::store_error{"not stored"}));
  ctx.log.info("task_accepted", {{"task_id", t.id},
                                 {"dependency", t.dependency},
                                 {"method", t.method},
                                 {"path", http::loggable_path(target.origin_form)},
                                 {"idempotency_key", t.idempotency_key},
                                 {"via", "admin_api"}});
  std::string body = "{\"task_id\":";
  observe::append_json_string(body, t.id);
  body += ",\"status\":\"PENDING\",\"dependency\":";
  observe::append_json_string(body, t.dependency);
  body += ",\"idempotency_key\":";
  observe::append_json_string(body, t.idempotency_key);
  body += "}\n";
  auto res = a.json(bhttp::status::created, std::move(body));
  res.set(bhttp::field::location, std::string(ctx.admin_base) + std::string(tasks_prefix) + t.id);
  co_return res;
}

/** POST /retry-policies: `{"id": ..., <policy keys as in the YAML>}`, read and checked by the
    loader's own rules (what R-1 forbids is refused with its rule id). Idempotent by id: the
    same policy again is 200, a different one under a taken id 409. */
net::awaitable<response> register_policy(const answers& a, const task_api_context& ctx, const std::string& text) {
  boost::system::error_code jec;
  auto doc = boost::json::parse(text, jec);
  if (jec || !doc.is_object()) co_return a.error(bhttp::status::bad_request, "bad_request", "the body must be a JSON object");
  auto& o = doc.as_object();
  auto const* idv = o.if_contains("id");
  if (!idv || !idv->is_string() || !valid_policy_id(idv->as_string()))
    co_return a.error(bhttp::status::bad_request, "bad_request",
                      "id must be 1 to 128 letters, digits, '.', '_' or '-'");
  std::string const id(idv->as_string());
  o.erase("id");
  std::string const spec = boost::json::serialize(o);
  std::optional<config::policy> policy;
  try {
    policy = config::load_policy_text(spec, "policy");
  } catch (const config::config_error& x) {
    std::string body = "{\"error\":{\"type\":\"invalid_policy\",\"message\":";
    observe::append_json_string(body, x.what());
    body += "},\"findings\":[";
    bool first = true;
    for (auto const& d : x.diagnostics()) {
      if (d.warning) continue;
      if (!first) body += ',';
      first = false;
      body += "{\"key\":";
      observe::append_json_string(body, d.path.starts_with("defaults.") ? d.path.substr(9) : d.path);
      body += ",\"message\":";
      observe::append_json_string(body, d.message);
      body += ",\"rule\":";
      if (d.rule.empty()) body += "null";
      else observe::append_json_string(body, d.rule);
      body += '}';
    }
    body += "]}\n";
    co_return a.json(bhttp::status::unprocessable_entity, std::move(body));
  }
  store::stored_policy const stored{id, spec, store::wall_clock::now()};
  auto [e, put] = co_await store::async_put_policy(ctx.store, stored, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (put == store::policy_put::conflict)
    co_return a.error(bhttp::status::conflict, "policy_exists", "another policy is registered as \"" + id + "\"");
  ctx.log.info("policy_registered", {{"policy_id", id}, {"new", put == store::policy_put::created}});
  std::string body = "{\"id\":";
  observe::append_json_string(body, id);
  body += ",\"policy\":" + config::policy_json(*policy) + "}\n";
  auto res = a.json(put == store::policy_put::created ? bhttp::status::created : bhttp::status::ok, std::move(body));
  res.set(bhttp::field::location, std::string(ctx.admin_base) + "/retry-policies/" + id);
  co_return res;
}

/// GET /retry-policies/{id}: the policy resolved (every key, built-ins filled in) and as registered.
net::awaitable<response> get_policy(const answers& a, store::task_store& store, const std::string& id) {
  auto [e, stored] = co_await store::async_get_policy(store, id, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!stored) co_return a.error(bhttp::status::not_found, "not_found", "no such policy");
  std::string body = "{\"id\":";
  observe::append_json_string(body, stored->id);
  body += ",\"created_at\":\"" + iso8601(stored->created_at) + "\",\"registered\":" + stored->spec;
  try {
    body += ",\"policy\":" + config::policy_json(config::load_policy_text(stored->spec, "policy " + id));
  } catch (const std::exception&) {
    body += ",\"policy\":null";  // a rule of this rebound refuses it: delivery uses the route's
  }
  body += "}\n";
  co_return a.json(bhttp::status::ok, std::move(body));
}

/// The dead-letter filter of a query string (GET /dlq) or a JSON body (POST /dlq/replay).
std::optional<std::string> read_filter(store::task_filter& f, std::string_view dependency, std::string_view since,
                                       std::string_view until) {
  f.dependency = std::string(dependency);
  if (!since.empty() && !(f.since = parse_time(since))) return "since must be an RFC 3339 UTC time";
  if (!until.empty() && !(f.until = parse_time(until))) return "until must be an RFC 3339 UTC time";
  return std::nullopt;
}

/// GET /dlq[?dependency=NAME][&since=T][&until=T][&after=ID][&limit=N]: dead letters by id, a page at a time.
net::awaitable<response> list_dlq(const answers& a, store::task_store& store, std::string_view target) {
  store::task_filter filter;
  auto const limit = page_limit(query_value(target, "limit"), 100);
  if (!limit) co_return a.error(bhttp::status::bad_request, "bad_request", "limit must be 1 to 500");
  filter.limit = *limit;
  filter.after = query_value(target, "after");
  if (auto problem = read_filter(filter, query_value(target, "dependency"), query_value(target, "since"),
                                 query_value(target, "until")))
    co_return a.error(bhttp::status::bad_request, "bad_request", *problem);
  auto [e, tasks] = co_await store::async_list(store, filter, use_tuple);
  if (e) co_return a.unavailable(*e);
  std::string body = "{\"items\":[";
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (i) body += ',';
    body += '{';
    task_fields(body, tasks[i]);
    body += ",\"dead_lettered_at\":\"" + iso8601(tasks[i].next_attempt_at) + "\"}";
  }
  body += "],\"next\":";
  if (tasks.size() == filter.limit) observe::append_json_string(body, tasks.back().id);
  else body += "null";
  body += "}\n";
  co_return a.json(bhttp::status::ok, std::move(body));
}

void log_replayed(const task_api_context& ctx, const std::string& id, std::string_view how) {
  ctx.log.info("task_replayed", {{"task_id", id}, {"how", how}});
}

/// POST /dlq/{id}/replay: the dead letter is delivered again, with its key, in a fresh window.
net::awaitable<response> replay(const answers& a, const task_api_context& ctx, const std::string& id) {
  auto [e, replayed] = co_await store::async_replay(ctx.store, id, store::wall_clock::now(), use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!replayed) co_return a.error(bhttp::status::not_found, "not_found", "no dead letter with this id");
  log_replayed(ctx, id, "one");
  co_return a.json(bhttp::status::accepted, "{\"id\":\"" + id + "\",\"status\":\"PENDING\"}\n");
}

/** POST /dlq/replay: the dead letters of a filter (`{"dependency", "since", "until",
    "limit"}`, every field optional) replayed, up to `limit` (100, at most 500) a call; `more`
    says a next call has more to take. */
net::awaitable<response> replay_matching(const answers& a, const task_api_context& ctx, const std::string& text) {
  boost::system::error_code jec;
  auto const doc = boost::json::parse(text.empty() ? std::string("{}") : text, jec);
  if (jec || !doc.is_object()) co_return a.error(bhttp::status::bad_request, "bad_request", "the body must be a JSON object");
  auto const& o = doc.as_object();
  auto str = [&](std::string_view k) -> std::string_view {
    auto const* v = o.if_contains(k);
    return v && v->is_string() ? std::string_view(v->as_string()) : std::string_view();
  };
  store::task_filter filter;
  if (auto problem = read_filter(filter, str("dependency"), str("since"), str("until")))
    co_return a.error(bhttp::status::bad_request, "bad_request", *problem);
  filter.limit = 100;
  if (auto const* l = o.if_contains("limit")) {
    if (!l->is_int64() || l->as_int64() < 1 || l->as_int64() > static_cast<std::int64_t>(max_page))
      co_return a.error(bhttp::status::bad_request, "bad_request", "limit must be 1 to 500");
    filter.limit = static_cast<std::size_t>(l->as_int64());
  }
  auto [e, ids] = co_await store::async_replay_matching(ctx.store, filter, store::wall_clock::now(), use_tuple);
  if (e) co_return a.unavailable(*e);
  std::string body = "{\"replayed\":[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) body += ',';
    observe::append_json_string(body, ids[i]);
    log_replayed(ctx, ids[i], "bulk");
  }
  body += "],\"more\":";
  body += ids.size() == filter.limit ? "true" : "false";
  body += "}\n";
  co_return a.json(bhttp::status::accepted, std::move(body));
}

/// DELETE /dlq/{id}: a dead letter someone has dealt with, gone with its attempts.
net::awaitable<response> delete_dead_letter(const answers& a, const task_api_context& ctx, const std::string& id) {
  auto [e, deleted] = co_await store::async_delete_dead_letter(ctx.store, id, use_tuple);
  if (e) co_return a.unavailable(*e);
  if (!deleted) co_return a.error(bhttp::status::not_found, "not_found", "no dead letter with this id");
  ctx.log.info("dead_letter_deleted", {{"task_id", id}});
  co_return a.json(bhttp::status::ok, "{\"id\":\"" + id + "\",\"deleted\":true}\n");
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
  std::string_view const t = req.target();
  auto const path = t.substr(0, t.find('?'));
  return path == "/retry-tasks" || path.starts_with(tasks_prefix) || path == "/retry-policies" ||
         path.starts_with(policies_prefix) || path == dlq_path || path.starts_with("/dlq/");
}

net::awaitable<response> task_api_answer(const bhttp::request<bhttp::string_body>& req, const task_api_context& ctx) {
  answers const a(req);
  auto& store = ctx.store;
  std::string_view const target = req.target();
  std::string_view const path = target.substr(0, target.find('?'));
  auto const method = req.method();
  bool const read = method == bhttp::verb::get || method == bhttp::verb::head;
  auto const& token_file = ctx.cfg.admin_token_file;
  if (!read && !token_file.empty()) {
    auto const token = read_token(token_file);
    if (!token) co_return a.error(bhttp::status::service_unavailable, "unavailable", "admin.token_file cannot be read");
    if (!bearer_matches(req, *token)) {
      auto res = a.error(bhttp::status::unauthorized, "unauthorized", "writes need Authorization: Bearer <admin token>");
      res.set(bhttp::field::www_authenticate, "Bearer realm=\"rebound-admin\"");
      co_return res;
    }
  }
  auto not_allowed = [&](std::string_view allow) {
    auto res = a.error(bhttp::status::method_not_allowed, "bad_request", std::string(allow) + " only");
    res.set(bhttp::field::allow, allow);
    return res;
  };
  // The segments after a prefix: {id} or {id}/{action}; ids hold no '/'.
  auto split = [](std::string_view rest) {
    auto const slash = rest.find('/');
    return std::pair<std::string, std::string>(std::string(rest.substr(0, slash)),
                                               slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash + 1)));
  };
  if (path == "/retry-tasks") {
    if (method == bhttp::verb::post) co_return co_await submit_task(a, ctx, req.body());
    co_return not_allowed("POST");
  }
  if (path.starts_with(tasks_prefix)) {
    auto const [id, action] = split(path.substr(tasks_prefix.size()));
    if (id.empty() || (!action.empty() && action != "attempts"))
      co_return a.error(bhttp::status::not_found, "not_found", "no such endpoint");
    if (action == "attempts") {
      if (read) co_return co_await list_attempts(a, store, id, target);
      co_return not_allowed("GET");
    }
    if (read) co_return co_await get_task(a, store, id);
    if (method == bhttp::verb::delete_) co_return co_await cancel_task(a, store, id);
    co_return not_allowed("GET, DELETE");
  }
  if (path == "/retry-policies") {
    if (method == bhttp::verb::post) co_return co_await register_policy(a, ctx, req.body());
    co_return not_allowed("POST");
  }
  if (path.starts_with(policies_prefix)) {
    auto const [id, action] = split(path.substr(policies_prefix.size()));
    if (id.empty() || !action.empty()) co_return a.error(bhttp::status::not_found, "not_found", "no such endpoint");
    if (read) co_return co_await get_policy(a, store, id);
    co_return not_allowed("GET");
  }
  if (path == dlq_path) {
    if (read) co_return co_await list_dlq(a, store, target);
    co_return not_allowed("GET");
  }
  if (path == "/dlq/replay") {
    if (method == bhttp::verb::post) co_return co_await replay_matching(a, ctx, req.body());
    co_return not_allowed("POST");
  }
  if (path.starts_with("/dlq/")) {
    auto const [id, action] = split(path.substr(5));
    if (id.empty() || (!action.empty() && action != "replay"))
      co_return a.error(bhttp::status::not_found, "not_found", "no such endpoint");
    if (action == "replay") {
      if (method == bhttp::verb::post) co_return co_await replay(a, ctx, id);
      co_return not_allowed("POST");
    }
    if (method == bhttp::verb::delete_) co_return co_await delete_dead_letter(a, ctx, id);
    co_return not_allowed("DELETE");
  }
  co_return a.error(bhttp::status::not_found, "not_found", "no such endpoint");
}

}  // namespace rebound::admin
